//! The `twin-handler` world: the [`TwinHandler`] trait and
//! [`export_twin_handler!`](crate::export_twin_handler).

use std::marker::PhantomData;

use crate::bindings::twin_handler as g;
use crate::instance::{self, NOT_INITIALISED};
use crate::types::twin_handler_conv as conv;
use crate::{TwinUpdate, Verdict};

/// A hook inside the twin update path, exported with
/// [`export_twin_handler!`](crate::export_twin_handler).
///
/// The host calls [`TwinHandler::init`] once with the manifest's `[config]` table as JSON text;
/// the value it returns receives every later [`TwinHandler::on_update`]. Updates arriving
/// before a successful `init` are rejected with `not initialised`. Calls are short and
/// synchronous and run under the manifest's time and memory limits; a trap (a panic, an
/// exhausted limit) rejects that one update.
///
/// ```no_run
/// use wedge_guest::{TwinHandler, TwinUpdate, Verdict};
///
/// struct NonNegative;
///
/// impl TwinHandler for NonNegative {
///     fn init(_config: &str) -> Result<Self, String> {
///         Ok(NonNegative)
///     }
///     fn on_update(&mut self, update: &TwinUpdate) -> Verdict {
///         match update.value.as_f64() {
///             Some(x) if x < 0.0 => Verdict::reject(format!("{} {x} is negative", update.property)),
///             _ => Verdict::Accept,
///         }
///     }
/// }
///
/// wedge_guest::export_twin_handler!(NonNegative);
/// ```
pub trait TwinHandler: Sized {
    /// Builds the handler from the manifest's `[config]` table, as JSON text (`{}` when the
    /// manifest has none). See [`parse_config`](crate::parse_config).
    fn init(config: &str) -> Result<Self, String>;

    /// Decides about one proposed change.
    fn on_update(&mut self, update: &TwinUpdate) -> Verdict;
}

/// Adapter from a [`TwinHandler`] to the generated export trait. Not public API.
#[doc(hidden)]
pub struct TwinHandlerExport<T>(PhantomData<T>);

impl<T: TwinHandler + 'static> g::Guest for TwinHandlerExport<T> {
    fn init(config: String) -> Result<(), String> {
        instance::init(|| T::init(&config))
    }

    fn on_update(update: g::TwinUpdate) -> g::Verdict {
        let update = conv::update_in(update);
        let verdict = instance::with(|h: &mut T| h.on_update(&update))
            .unwrap_or_else(|| Verdict::Reject(NOT_INITIALISED.to_string()));
        conv::verdict_out(verdict)
    }
}

/// Exports a [`TwinHandler`] implementation as the component's `twin-handler` world.
///
/// Use it once, at the top level of a `cdylib` crate that enables the SDK's `twin-handler`
/// feature.
///
/// ```no_run
/// use wedge_guest::{TwinHandler, TwinUpdate, Verdict};
///
/// struct AcceptAll;
///
/// impl TwinHandler for AcceptAll {
///     fn init(_: &str) -> Result<Self, String> { Ok(AcceptAll) }
///     fn on_update(&mut self, _: &TwinUpdate) -> Verdict { Verdict::Accept }
/// }
///
/// wedge_guest::export_twin_handler!(AcceptAll);
/// ```
#[macro_export]
macro_rules! export_twin_handler {
    ($ty:ty) => {
        // Only a Wasm build exports anything: on a native target (unit tests of a module) the
        // export names (`init`, `poll`, ...) would clash with C library symbols.
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            type __WedgeTwinHandlerExport = $crate::__private::TwinHandlerExport<$ty>;
            $crate::__private::twin_handler::__wedge_export_twin_handler_world!(
                __WedgeTwinHandlerExport with_types_in $crate::__private::twin_handler
            );
        };
        #[cfg(not(target_arch = "wasm32"))]
        const _: () = {
            fn __wedge_assert_impl<T: $crate::TwinHandler + 'static>() {}
            let _ = __wedge_assert_impl::<$ty>;
        };
    };
}
