//! The `mapper` world: the [`Mapper`] trait and [`export_mapper!`](crate::export_mapper).

use std::marker::PhantomData;

use crate::bindings::mapper as g;
use crate::instance::{self, NOT_INITIALISED};
use crate::types::mapper_conv as conv;
use crate::{Device, TwinValue};

/// A long-lived device driver for one protocol, exported with
/// [`export_mapper!`](crate::export_mapper).
///
/// The host calls [`Mapper::init`] once with the manifest's `[config]` table as JSON text; the
/// value it returns is kept for the instance's lifetime and receives every later call. Calls
/// made before a successful `init` fail with `not initialised`. Values read from devices go back
/// through [`report::actual`](crate::report::actual); device I/O goes through
/// [`net`](crate::net) (TCP, UDP), [`http`](crate::http) and [`serial`](crate::serial), to what
/// the manifest grants.
///
/// ```no_run
/// use std::collections::HashMap;
/// use wedge_guest::{Device, Mapper, TwinValue, report};
///
/// #[derive(Default)]
/// struct Echo {
///     devices: HashMap<String, Device>,
///     stored: HashMap<(String, String), TwinValue>,
/// }
///
/// impl Mapper for Echo {
///     fn init(_config: &str) -> Result<Self, String> {
///         Ok(Echo::default())
///     }
///     fn add_device(&mut self, device: Device) -> Result<(), String> {
///         self.devices.insert(device.id.clone(), device);
///         Ok(())
///     }
///     fn remove_device(&mut self, id: &str) {
///         self.devices.remove(id);
///     }
///     fn poll(&mut self, device: &str, properties: &[String]) -> Result<(), String> {
///         for ((d, p), v) in &self.stored {
///             if d == device && properties.contains(p) {
///                 report::actual(d, p, v.clone())?;
///             }
///         }
///         Ok(())
///     }
///     fn write_property(&mut self, device: &str, property: &str, value: TwinValue) -> Result<(), String> {
///         self.stored.insert((device.to_string(), property.to_string()), value);
///         Ok(())
///     }
/// }
///
/// wedge_guest::export_mapper!(Echo);
/// ```
pub trait Mapper: Sized {
    /// Builds the mapper from the manifest's `[config]` table, as JSON text (`{}` when the
    /// manifest has none). See [`parse_config`](crate::parse_config).
    fn init(config: &str) -> Result<Self, String>;

    /// Starts driving a device.
    fn add_device(&mut self, device: Device) -> Result<(), String>;

    /// Stops driving a device.
    fn remove_device(&mut self, id: &str);

    /// Collects the named properties of the device now and reports them with
    /// [`report::actual`](crate::report::actual). The host calls it with the properties whose
    /// collect cycle is due (each property's `collectCycle`, else 1 s), grouped when several
    /// are due together, and with all of them for an explicit poll. A device without
    /// properties is polled on the default cycle with none, to report its state.
    fn poll(&mut self, device: &str, properties: &[String]) -> Result<(), String>;

    /// Writes a desired value to the device.
    fn write_property(
        &mut self,
        device: &str,
        property: &str,
        value: TwinValue,
    ) -> Result<(), String>;
}

/// Adapter from a [`Mapper`] to the generated export trait. Not public API.
#[doc(hidden)]
pub struct MapperExport<T>(PhantomData<T>);

fn not_initialised<R>() -> Result<R, String> {
    Err(NOT_INITIALISED.to_string())
}

impl<T: Mapper + 'static> g::Guest for MapperExport<T> {
    fn init(config: String) -> Result<(), String> {
        instance::init(|| T::init(&config))
    }

    fn add_device(device: g::Device) -> Result<(), String> {
        let device = conv::device_in(device);
        instance::with(|m: &mut T| m.add_device(device)).unwrap_or_else(not_initialised)
    }

    fn remove_device(id: String) {
        instance::with(|m: &mut T| m.remove_device(&id));
    }

    fn poll(device: String, properties: Vec<String>) -> Result<(), String> {
        instance::with(|m: &mut T| m.poll(&device, &properties)).unwrap_or_else(not_initialised)
    }

    fn write_property(device: String, property: String, value: g::TwinValue) -> Result<(), String> {
        let value = conv::value_in(value);
        instance::with(|m: &mut T| m.write_property(&device, &property, value))
            .unwrap_or_else(not_initialised)
    }
}

/// Exports a [`Mapper`] implementation as the component's `mapper` world.
///
/// Use it once, at the top level of a `cdylib` crate that enables the SDK's `mapper` feature.
///
/// ```no_run
/// use wedge_guest::{Device, Mapper, TwinValue};
///
/// struct Nothing;
///
/// impl Mapper for Nothing {
///     fn init(_: &str) -> Result<Self, String> { Ok(Nothing) }
///     fn add_device(&mut self, _: Device) -> Result<(), String> { Ok(()) }
///     fn remove_device(&mut self, _: &str) {}
///     fn poll(&mut self, _: &str, _: &[String]) -> Result<(), String> { Ok(()) }
///     fn write_property(&mut self, _: &str, _: &str, _: TwinValue) -> Result<(), String> {
///         Err("read-only".into())
///     }
/// }
///
/// wedge_guest::export_mapper!(Nothing);
/// ```
#[macro_export]
macro_rules! export_mapper {
    ($ty:ty) => {
        // Only a Wasm build exports anything: on a native target (unit tests of a module) the
        // export names (`init`, `poll`, ...) would clash with C library symbols.
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            type __WedgeMapperExport = $crate::__private::MapperExport<$ty>;
            $crate::__private::mapper::__wedge_export_mapper_world!(
                __WedgeMapperExport with_types_in $crate::__private::mapper
            );
        };
        #[cfg(not(target_arch = "wasm32"))]
        const _: () = {
            fn __wedge_assert_impl<T: $crate::Mapper + 'static>() {}
            let _ = __wedge_assert_impl::<$ty>;
        };
    };
}
