//! Twin get.
