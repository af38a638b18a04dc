//! How farm writes to the terminal: colour when it is a terminal and
//! `NO_COLOR` is unset, quiet and verbose levels, aligned tables, and a
//! time on every note of a run (`--timestamps`).

use std::io::{self, IsTerminal, Write};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorWhen {
    Auto,
    Always,
    Never,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    Good,
    Warn,
    Bad,
    Dim,
    Bold,
}

/// The time a note begins with: `farm run`'s lines can be read back in
/// order from a night's log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Timestamps {
    /// `2026-12-01 07:30:05`, this machine's time zone.
    Local,
    /// `2026-12-01T06:30:05Z`.
    Utc,
    /// No time.
    #[default]
    None,
}

impl Timestamps {
    /// Now, as notes begin with it (`None`: they do not).
    fn now(self) -> Option<String> {
        match self {
            Timestamps::Local => Some(jiff::Zoned::now().strftime("%Y-%m-%d %H:%M:%S").to_string()),
            Timestamps::Utc => Some(
                jiff::Timestamp::now()
                    .strftime("%Y-%m-%dT%H:%M:%SZ")
                    .to_string(),
            ),
            Timestamps::None => None,
        }
    }
}

/// Output settings, decided once from flags and the environment.
#[derive(Clone, Copy, Debug)]
pub struct Out {
    pub color_stdout: bool,
    pub color_stderr: bool,
    /// -1 quiet, 0 normal, 1+ verbose.
    pub level: i8,
    /// What notes begin with.
    pub stamp: Timestamps,
}

impl Out {
    pub fn new(when: ColorWhen, quiet: bool, verbose: u8) -> Out {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        let decide = |tty: bool| match when {
            ColorWhen::Always => true,
            ColorWhen::Never => false,
            ColorWhen::Auto => tty && !no_color,
        };
        Out {
            color_stdout: decide(io::stdout().is_terminal()),
            color_stderr: decide(io::stderr().is_terminal()),
            level: if quiet { -1 } else { verbose.min(3) as i8 },
            stamp: Timestamps::None,
        }
    }

    /// The same, with notes beginning with the time as `stamp` says.
    pub fn stamped(self, stamp: Timestamps) -> Out {
        Out { stamp, ..self }
    }

    pub fn quiet(&self) -> bool {
        self.level < 0
    }

    pub fn verbose(&self) -> bool {
        self.level > 0
    }

    /// A line of normal output on stdout (skipped when quiet).
    pub fn say(&self, line: &str) -> io::Result<()> {
        if self.quiet() {
            return Ok(());
        }
        writeln!(io::stdout().lock(), "{line}")
    }

    /// Data on stdout: printed even when quiet (JSON, tables asked for).
    pub fn data(&self, text: &str) -> io::Result<()> {
        let mut out = io::stdout().lock();
        out.write_all(text.as_bytes())?;
        out.flush()
    }

    /// A note on stderr (skipped when quiet).
    pub fn note(&self, line: &str) {
        self.note_styled(None, line);
    }

    /// A note on stderr in `style` (when stderr takes colour).
    pub fn note_styled(&self, style: Option<Style>, line: &str) {
        if !self.quiet() {
            self.write_note(style, line);
        }
    }

    /// A warning on stderr: something a person should know even with -q.
    pub fn warn(&self, line: &str) {
        self.write_note(Some(Style::Warn), line);
    }

    /// A note on stderr shown only with -v.
    pub fn debug(&self, line: &str) {
        if self.verbose() {
            self.write_note(Some(Style::Dim), line);
        }
    }

    fn write_note(&self, style: Option<Style>, line: &str) {
        let line = match style {
            Some(s) => paint(self.color_stderr, s, line),
            None => line.to_owned(),
        };
        match self.stamp.now() {
            Some(time) => eprintln!("{} {line}", paint(self.color_stderr, Style::Dim, &time)),
            None => eprintln!("{line}"),
        }
    }

    pub fn paint(&self, style: Style, s: &str) -> String {
        paint(self.color_stdout, style, s)
    }

    pub fn paint_err(&self, style: Style, s: &str) -> String {
        paint(self.color_stderr, style, s)
    }
}

/// `1 session`, `2 sessions`: a count and its noun, singular or plural.
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

pub fn paint(on: bool, style: Style, s: &str) -> String {
    if !on {
        return s.to_owned();
    }
    let code = match style {
        Style::Good => "32",
        Style::Warn => "33",
        Style::Bad => "31",
        Style::Dim => "2",
        Style::Bold => "1",
    };
    format!("\x1b[{code}m{s}\x1b[0m")
}

/// Rows of cells aligned into columns. A cell's style is applied after
/// padding, so colour codes never throw the columns off.
pub fn table(header: &[&str], rows: &[Vec<(String, Option<Style>)>], color: bool) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, (cell, _)) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    // Written straight into one string: a listing of 10,000 claims is
    // 80,000 cells.
    let mut out =
        String::with_capacity((widths.iter().sum::<usize>() + 2 * widths.len()) * (rows.len() + 1));
    let mut line = |cells: &mut dyn Iterator<Item = (&str, Option<Style>)>| {
        let start = out.len();
        for (i, ((cell, style), w)) in cells.zip(&widths).enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            match style {
                Some(s) => out.push_str(&paint(color, s, cell)),
                None => out.push_str(cell),
            }
            let pad = w.saturating_sub(cell.chars().count());
            out.extend(std::iter::repeat_n(' ', pad));
        }
        let end = start + out[start..].trim_end().len();
        out.truncate(end);
        out.push('\n');
    };
    line(&mut header.iter().map(|h| (*h, Some(Style::Bold))));
    for row in rows {
        line(&mut row.iter().map(|(cell, style)| (cell.as_str(), *style)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_says_its_noun_in_the_right_number() {
        assert_eq!(count(1, "session", "sessions"), "1 session");
        assert_eq!(count(0, "session", "sessions"), "0 sessions");
        assert_eq!(
            count(2, "failed attempt", "failed attempts"),
            "2 failed attempts"
        );
    }

    #[test]
    fn table_aligns_with_and_without_color() {
        let rows = vec![
            vec![
                ("a".to_string(), None),
                ("alive".to_string(), Some(Style::Good)),
            ],
            vec![
                ("longer".to_string(), None),
                ("dead".to_string(), Some(Style::Bad)),
            ],
        ];
        let plain = table(&["TASK", "STATE"], &rows, false);
        assert_eq!(plain, "TASK    STATE\na       alive\nlonger  dead\n");
        let colored = table(&["TASK", "STATE"], &rows, true);
        let stripped = colored
            .replace("\x1b[1m", "")
            .replace("\x1b[32m", "")
            .replace("\x1b[31m", "")
            .replace("\x1b[0m", "");
        assert_eq!(stripped, plain);
    }
}
