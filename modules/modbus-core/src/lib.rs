//! `modbus-core`: the parts of Modbus that do not depend on the transport, shared by the
//! `modbus-tcp` and `modbus-rtu` mappers so both speak the same PDUs and read the same
//! visitors the same way.
//!
//! * [`pdu`]: requests, their PDUs, validated answers, exceptions;
//! * [`codec`]: a property's `visitor` JSON, and register/bit contents ↔ twin values;
//! * [`point`]: a device property with its parsed visitor, what a mapper polls.
//!
//! A library, not a mapper: it exports no component functions and makes no host calls, so
//! everything here is unit-tested natively
//! (`cargo test -p modbus-core --target x86_64-unknown-linux-gnu` in `modules/`).

pub mod codec;
pub mod pdu;
pub mod point;
