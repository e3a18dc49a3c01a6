//! The durable outbox of cloud-bound messages.
