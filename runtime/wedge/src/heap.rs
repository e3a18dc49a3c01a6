//! Hands memory freed by one-off work back to the operating system.
//!
//! Compiling a component (a deploy, or a start with a cold cache) allocates tens of MiB in
//! Cranelift that are freed when it ends, but glibc keeps freed memory in its arenas: a node
//! that compiled one mapper would idle at twice its steady-state RSS. Trimming once after such
//! work returns it.

/// Returns the free memory of every malloc arena to the OS (glibc); a no-op elsewhere.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` only walks glibc's own arenas under their locks; it has no
    // preconditions and touches no memory the program still uses.
    unsafe {
        libc::malloc_trim(0);
    }
}
