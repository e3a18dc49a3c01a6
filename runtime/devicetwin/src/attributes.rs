//! Device attribute updates.
