//! Device backends behind one trait: `host` (CPU; what every test uses), later `cuda` and `hip`.
//! PLACEHOLDER (skeleton): lands with the IO-engine issue.
