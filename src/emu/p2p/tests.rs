//! Point-to-point transfers through the C entry points.
