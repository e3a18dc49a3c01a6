//! Linking a component against what Wedge provides: WASI (async) plus the world's imports.
//!
//! Pre-instantiation is where a component for the wrong world, or one importing something
//! Wedge does not provide, is refused — before any guest code runs.

use wasmtime::component::{Component, HasSelf, Linker};

use crate::bindings::{handler, mapper};
use crate::engine::WasmEngine;
use crate::error::WasmError;
use crate::host_state::HostState;
use crate::manifest::ModuleKind;

/// A component linked for its world, ready to instantiate cheaply.
pub(crate) enum Pre {
    /// `wedge:device/twin-handler`.
    Handler(handler::TwinHandlerPre<HostState>),
    /// `wedge:device/mapper`.
    Mapper(mapper::MapperPre<HostState>),
}

pub(crate) fn pre_instantiate(
    engine: &WasmEngine,
    component: &Component,
    kind: ModuleKind,
) -> Result<Pre, WasmError> {
    let mut linker = Linker::<HostState>::new(engine.engine());
    let engine_err = |e: wasmtime::Error| WasmError::Engine(format!("{e:#}"));
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(engine_err)?;
    let refused = |e: wasmtime::Error| {
        WasmError::Invalid(format!(
            "not a wedge:device/{} component: {e:#}",
            kind.as_str()
        ))
    };
    match kind {
        ModuleKind::TwinHandler => {
            handler::TwinHandler::add_to_linker::<_, HasSelf<HostState>>(&mut linker, |s| s)
                .map_err(engine_err)?;
            let pre = linker.instantiate_pre(component).map_err(refused)?;
            Ok(Pre::Handler(
                handler::TwinHandlerPre::new(pre).map_err(refused)?,
            ))
        }
        ModuleKind::Mapper => {
            mapper::Mapper::add_to_linker::<_, HasSelf<HostState>>(&mut linker, |s| s)
                .map_err(engine_err)?;
            let pre = linker.instantiate_pre(component).map_err(refused)?;
            Ok(Pre::Mapper(mapper::MapperPre::new(pre).map_err(refused)?))
        }
    }
}
