//! Device definitions (KubeEdge `Device`/`DeviceModel` objects resolved against each other),
//! from the shared device vocabulary ([`wedge_device::definition`]), and [`record`]: the
//! devicetwin rows a newly defined device gets.

pub use wedge_device::definition::*;

pub mod record;

pub use record::{DEFINED_VERSION, new_record};
