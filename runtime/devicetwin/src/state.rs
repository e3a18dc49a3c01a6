//! Device state updates.
