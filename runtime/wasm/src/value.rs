//! Twin values: typed for guests, strings plus a type name for KubeEdge. The type lives in
//! the shared device vocabulary, with the one type check devicetwin uses too.

pub use wedge_device::value::TwinValue;
