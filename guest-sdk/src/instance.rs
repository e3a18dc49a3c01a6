//! The one instance of the module's type, set by `init`.
//!
//! A component instance is single-threaded and the host never re-enters it, so a thread-local
//! cell is all the synchronisation needed.

use std::any::Any;
use std::cell::RefCell;

thread_local! {
    static INSTANCE: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

/// Message returned by calls made before a successful `init`.
pub(crate) const NOT_INITIALISED: &str = "not initialised";

/// Runs `init` and keeps what it builds. Any earlier instance is dropped first; when `init`
/// fails the module is left uninitialised.
#[allow(dead_code)]
pub(crate) fn init<T: 'static>(init: impl FnOnce() -> Result<T, String>) -> Result<(), String> {
    INSTANCE.with(|cell| cell.borrow_mut().take());
    let instance = init()?;
    INSTANCE.with(|cell| *cell.borrow_mut() = Some(Box::new(instance)));
    Ok(())
}

/// Runs `f` on the instance, or returns `None` when there is none (yet).
#[allow(dead_code)]
pub(crate) fn with<T: 'static, R>(f: impl FnOnce(&mut T) -> R) -> Option<R> {
    INSTANCE.with(|cell| {
        let mut slot = cell.borrow_mut();
        slot.as_mut()?.downcast_mut::<T>().map(f)
    })
}
