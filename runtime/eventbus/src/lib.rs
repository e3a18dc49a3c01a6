//! EventBus (in progress).
