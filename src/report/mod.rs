//! `farm report`'s model and its two renderings: the night as the journal
//! tells it ([`night`]), the board's critical path ([`path`]), one
//! self-contained HTML page ([`html`]) and a Chrome trace ([`trace`]);
//! what needs a person, for the page and `farm status` ([`needs`]).
//! Nothing here reads files or the board: `commands/report.rs` does.

pub mod html;
pub mod needs;
pub mod night;
pub mod path;
pub mod trace;
