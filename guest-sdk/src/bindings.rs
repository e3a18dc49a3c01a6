//! Bindings generated from `../wit` (package `wedge:device@0.2.0`), one module per world.
//!
//! Nothing here is part of the public API: the SDK converts every generated type into its own
//! (`TwinValue`, `Device`, ...). The modules are `pub` only so that the export macros, expanded in a
//! module's crate, can reach them.

#![allow(clippy::too_many_arguments)]

/// Bindings of the `mapper` world.
#[cfg(feature = "mapper")]
pub mod mapper {
    wit_bindgen::generate!({
        path: "../wit",
        world: "wedge:device/mapper",
        pub_export_macro: true,
        export_macro_name: "__wedge_export_mapper_world",
        default_bindings_module: "wedge_guest::__private::mapper",
    });
}

/// Bindings of the `twin-handler` world.
#[cfg(feature = "twin-handler")]
pub mod twin_handler {
    wit_bindgen::generate!({
        path: "../wit",
        world: "wedge:device/twin-handler",
        pub_export_macro: true,
        export_macro_name: "__wedge_export_twin_handler_world",
        default_bindings_module: "wedge_guest::__private::twin_handler",
    });
}
