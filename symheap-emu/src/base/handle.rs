//! The handles the emulator gives out, one type per kind, so that a stream cannot be passed
//! where an event is wanted.
//!
//! C passes every handle as an opaque pointer (`aclrtStream`, `HcclComm`, ...); the ABI
//! bodies turn it into its type with `from_c` and back with `to_c`, and nothing below them
//! sees a bare number. `NULL` is a value of each type (C may pass it), refused where a live
//! object is needed.
//!
//! Argument order: a function's first handle is the object its C function is named after or
//! acts on (the event of `event::record(event, stream)`, the stream of
//! `event::stream_wait(stream, event)`, the model of `graph::execute(model, stream)`); the
//! handles it acts with follow.

use std::fmt;

use crate::sys::{
    HcclComm, HcclCommSymWindow, aclmdlRI, aclrtDrvMemHandle, aclrtEvent, aclrtStream,
};

use crate::base::registry::{HandleKind, new_raw};

/// Defines a handle type over the C type `$c`, and, with a [`HandleKind`], its maker.
macro_rules! handle {
    ($(#[$doc:meta])* $name:ident, $c:ty, $kind:ident) => {
        handle!($(#[$doc])* $name, $c);

        impl $name {
            /// A fresh handle, never given out before.
            pub(crate) fn fresh() -> Self {
                Self(new_raw(HandleKind::$kind))
            }
        }
    };
    ($(#[$doc:meta])* $name:ident, $c:ty) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
        #[repr(transparent)]
        pub(crate) struct $name(usize);

        impl $name {
            /// The C NULL handle.
            #[allow(dead_code, reason = "not every kind needs it")]
            pub(crate) const NULL: Self = Self(0);

            /// The handle C passed.
            pub(crate) fn from_c(c: $c) -> Self {
                Self(c as usize)
            }

            /// The handle as C receives it.
            pub(crate) fn to_c(self) -> $c {
                self.0 as $c
            }

            /// The handle whose value is `raw` (a window's is an address).
            #[allow(dead_code, reason = "not every kind needs it")]
            pub(crate) const fn from_raw(raw: usize) -> Self {
                Self(raw)
            }

            /// The handle's value, for a store that keeps it as a number (an atomic).
            #[allow(dead_code, reason = "not every kind needs it")]
            pub(crate) const fn raw(self) -> usize {
                self.0
            }

            /// Whether this is C's NULL.
            #[allow(dead_code, reason = "not every kind needs it")]
            pub(crate) fn is_null(self) -> bool {
                self.0 == 0
            }
        }

        impl fmt::LowerHex for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::LowerHex::fmt(&self.0, f)
            }
        }
    };
}

handle!(
    /// `aclrtStream`.
    StreamHandle,
    aclrtStream,
    Stream
);
handle!(
    /// `aclrtEvent`.
    EventHandle,
    aclrtEvent,
    Event
);
handle!(
    /// `aclmdlRI`: a model (a capture in progress, or its graph).
    ModelHandle,
    aclmdlRI,
    Model
);
handle!(
    /// `aclrtDrvMemHandle`: a physical memory allocation.
    PhysicalHandle,
    aclrtDrvMemHandle,
    Physical
);
handle!(
    /// `HcclComm`.
    CommHandle,
    HcclComm,
    Comm
);
handle!(
    /// `HcclCommSymWindow`: the address of the window's descriptor.
    WindowHandle,
    HcclCommSymWindow
);
