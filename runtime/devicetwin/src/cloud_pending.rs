//! Cloud-bound messages pending confirmation, resent when idle.
