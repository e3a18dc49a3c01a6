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
    refuse_other_world_versions(engine, component)?;
    refuse_other_world(engine, component, kind)?;
    let mut linker = Linker::<HostState>::new(engine.engine());
    let engine_err = |e: wasmtime::Error| WasmError::engine_from("cannot link", e);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(engine_err)?;
    let refused = |e: wasmtime::Error| {
        let mut context = format!("not a wedge:device/{} component", kind.as_str());
        if format!("{e:#}").contains("wasi:sockets") {
            // What `std::net` compiles to: guests reach devices through the SDK instead.
            context.push_str(
                " (it imports wasi:sockets, which `std::net` uses: reach devices with \
                 `wedge_guest::net` under the manifest's endpoint grants)",
            );
        }
        WasmError::invalid_from(context, e)
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
            // Outgoing HTTP for REST devices; every request is checked against the grants.
            wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)
                .map_err(engine_err)?;
            let pre = linker.instantiate_pre(component).map_err(refused)?;
            Ok(Pre::Mapper(mapper::MapperPre::new(pre).map_err(refused)?))
        }
    }
}

/// Refuses a mapper deployed as a twin handler, or the other way round, naming what the
/// component is and what to change — instead of the linker's list of missing exports. The
/// worlds tell themselves apart by their exports: only a mapper exports `poll`, only a
/// handler `on-update`.
fn refuse_other_world(
    engine: &WasmEngine,
    component: &Component,
    kind: ModuleKind,
) -> Result<(), WasmError> {
    let ty = component.component_type();
    let exports: Vec<String> = ty
        .exports(engine.engine())
        .map(|(name, _)| name.to_owned())
        .collect();
    // The export only that world has, per kind.
    let mark = |kind: ModuleKind| match kind {
        ModuleKind::Mapper => "poll",
        ModuleKind::TwinHandler => "on-update",
    };
    let Some(found) = [ModuleKind::Mapper, ModuleKind::TwinHandler]
        .into_iter()
        .find(|k| exports.iter().any(|e| e == mark(*k)))
    else {
        return Ok(()); // neither: the linker names what is missing
    };
    if found == kind {
        return Ok(());
    }
    // The SDK's feature is the kind's name; its export macro the same in snake case.
    Err(WasmError::invalid(format!(
        "the component is a {found} (it exports `{}`), but its manifest says {kind}: set `kind = \"{found}\"` \
         in wedge.toml, or build the crate with the wedge-guest feature `{kind}` and `export_{}!`",
        mark(found),
        kind.as_str().replace('-', "_"),
        found = found.as_str(),
        kind = kind.as_str(),
    )))
}

/// The package version this host serves.
pub(crate) const WIT_PACKAGE: &str = "wedge:device@0.2.0";

/// Refuses a component built against another version of `wedge:device` with a message saying
/// what to do, instead of the linker's "matching implementation was not found".
fn refuse_other_world_versions(
    engine: &WasmEngine,
    component: &Component,
) -> Result<(), WasmError> {
    let ty = component.component_type();
    for (name, _) in ty.imports(engine.engine()) {
        let Some(rest) = name.strip_prefix("wedge:device/") else {
            continue;
        };
        let version = rest.split_once('@').map(|(_, v)| v).unwrap_or("none");
        if version != "0.2.0" {
            return Err(WasmError::invalid(format!(
                "the component imports {name}, built against wedge:device@{version}; this node \
                 serves {WIT_PACKAGE}: rebuild the module with wedge-guest 0.2 (the 0.2 `poll` \
                 takes the properties due)"
            )));
        }
    }
    Ok(())
}
