//! The streaming engine: staging ring, copy engine, requests, tickets, stats.
//! PLACEHOLDER (skeleton): lands with the IO-engine issue.
