//! The board: tasks as files on the hub's main branch, and the state of each.

mod graph;

pub use graph::*;
