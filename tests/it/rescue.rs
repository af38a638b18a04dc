//! `farm rescue`: the work farm kept on rescue branches, listed, shown, applied and dropped.
