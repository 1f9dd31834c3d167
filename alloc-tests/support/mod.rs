//! Helpers shared by the test modules.

#[path = "../../symheap-heap/tests/support/rng.rs"]
pub mod rng;

/// The place of `window` in `seen` (added at the end when new): a window's number in the pool,
/// the same on every rank, where the handles themselves differ.
pub fn window_index(
    seen: &mut Vec<symheap::raw::WindowHandle>,
    window: symheap::raw::WindowHandle,
) -> usize {
    match seen.iter().position(|&w| w == window) {
        Some(i) => i,
        None => {
            seen.push(window);
            seen.len() - 1
        }
    }
}
