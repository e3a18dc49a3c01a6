//! Cloud syncs of twins (deal types 1-3) with KubeEdge's version rules.
