//! The night as one self-contained HTML page: the CSS, the SVG and a few
//! lines of script inline, the sessions embedded as JSON, and a
//! Content-Security-Policy that lets the page load nothing at all (no CDN,
//! no font, no image but `data:`). The charts are drawn here, as SVG, so the
//! page shows everything without its script; the script only fills the
//! panel of a clicked bar.
//!
//! Like `cargo build --timings`, one lane per worker; unlike it, each bar
//! says how it ended, waits are drawn as such, and the lanes share their
//! time axis with the tasks-done curve and the agents-busy line below them.

use std::fmt::Write as _;

use jiff::tz::TimeZone;
use serde_json::json;

use std::collections::BTreeMap;

use super::needs::NeedsYou;
use super::night::{Kind, Night, Spent, Why};
use crate::age::Age;

/// What the page shows besides the night.
pub struct Page<'a> {
    pub night: &'a Night,
    /// What the report covers, in words ("the last night: 3 runs").
    pub scope: String,
    /// The critical path and its session seconds, or why it is unknown.
    pub critical: Result<(Vec<String>, f64), String>,
    /// The time zone of the axis and the times shown.
    pub tz: TimeZone,
    /// When the page was made (seconds since the epoch).
    pub made: f64,
    /// What needs a person, shown first (`None`: not known, not shown).
    pub needs: Option<&'a NeedsYou>,
    /// How each task stands now, for the "By task" table (task → `done`,
    /// `failed`, `ready`…).
    pub outcomes: BTreeMap<String, String>,
    /// The agent's last words in a failed session's log, by the session's
    /// index, for its bar's panel.
    pub last_words: BTreeMap<usize, String>,
}

/// Plot geometry: the lanes' labels take the gutter; the plot the rest.
const WIDTH: f64 = 1200.0;
const GUTTER: f64 = 150.0;
const LANE: f64 = 22.0;
const BAR: f64 = 16.0;
const AXIS: f64 = 24.0;
const CURVE: f64 = 170.0;
/// The width of a character of a bar's label (10px system-ui, with room):
/// a label is drawn on a bar only where it fits whole.
const LABEL_CHAR: f64 = 6.2;

const CSS: &str = "
:root{--done:#2e9e5b;--failed:#d64545;--timeout:#e07b24;--limit:#8e6bd1;--api:#c2489c;
--merge:#3a7bd5;--rescued:#d6a823;--other:#9aa3ad;--ink:#1d232a;--dim:#667;--line:#dde2e7}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;color:var(--ink);margin:24px;max-width:1280px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px}
.sub{color:var(--dim);margin:0 0 16px}
.cards{display:flex;flex-wrap:wrap;gap:10px}
.card{border:1px solid var(--line);border-radius:6px;padding:8px 12px;min-width:120px}
.card b{display:block;font-size:20px}.card span{color:var(--dim);font-size:12px}
.legend{display:flex;flex-wrap:wrap;gap:12px;margin:8px 0;font-size:12px}
.legend i{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:4px;vertical-align:-2px}
svg{width:100%;height:auto;display:block}
svg text{font-size:11px;fill:var(--dim)}svg text.lane{fill:var(--ink);font-size:12px}
.grid{stroke:var(--line);stroke-width:1}
rect.b{cursor:pointer}rect.b:hover,rect.b.sel{stroke:var(--ink);stroke-width:1.5}
rect.b.crit{stroke:#000;stroke-width:1;stroke-dasharray:3 2}
.done{fill:var(--done);background:var(--done)}.failed{fill:var(--failed);background:var(--failed)}
.timeout{fill:var(--timeout);background:var(--timeout)}.limit{fill:var(--limit);background:var(--limit)}
.api{fill:var(--api);background:var(--api)}.merge{fill:var(--merge);background:var(--merge)}
.rescued{fill:var(--rescued);background:var(--rescued)}.other{fill:var(--other);background:var(--other)}
rect.w{fill:url(#hatch);stroke:none}rect.w.breaker{fill:url(#hatch2)}
.wl{background:repeating-linear-gradient(45deg,#b9a7e6 0 3px,#fff 3px 6px)}
.wb{background:repeating-linear-gradient(45deg,#e6a7a7 0 3px,#fff 3px 6px)}
path.curve{fill:none;stroke:var(--done);stroke-width:2}path.busy{fill:none;stroke:var(--merge);stroke-width:1.5;stroke-dasharray:4 3}
#detail{border:1px solid var(--line);border-radius:6px;padding:10px 14px;min-height:48px;background:#f8f9fa}
#detail dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:0}#detail dt{color:var(--dim)}
#detail dd{margin:0;word-break:break-all}
table{border-collapse:collapse;font-size:13px}th,td{padding:3px 10px;text-align:right;border-bottom:1px solid var(--line)}
th:first-child,td:first-child{text-align:left}th{color:var(--dim);font-weight:600}
.path{font-family:ui-monospace,monospace;font-size:13px}
svg text.bt{fill:#fff;font-size:10px;pointer-events:none}
#needs-you{border:1px solid var(--line);border-left:4px solid var(--failed);border-radius:6px;padding:2px 14px 6px;margin:14px 0}
#needs-you h2{margin:10px 0 6px}.needs{margin:0;padding-left:18px}.need{margin:3px 0}
.need b{display:inline-block;min-width:64px}.n-failed b{color:var(--failed)}.n-stuck b{color:var(--timeout)}
.n-rescued b{color:#a07d10}.need .look code{color:var(--dim);font-size:12px}
#needs-you p{margin:6px 0}#needs-you .none{color:var(--done)}
";

/// The page's script: a click on a bar shows its session in `#detail`.
const SCRIPT: &str = "
const N=JSON.parse(document.getElementById('night').textContent);
const D=document.getElementById('detail');
const esc=s=>String(s).replace(/[&<>\"]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','\"':'&quot;'}[c]));
const age=s=>{s=Math.round(s);const h=Math.floor(s/3600),m=Math.floor(s%3600/60),x=s%60;return (h?h+'h':'')+(h||m?m+'m':'')+x+'s'};
let sel=null;
document.getElementById('lanes').addEventListener('click',ev=>{
 const r=ev.target.closest('rect.b');if(!r)return;
 if(sel)sel.classList.remove('sel');sel=r;r.classList.add('sel');
 const s=N.sessions[+r.dataset.i];
 const rows=[['task',s.task],['attempt',s.attempt??'-'],['agent',N.lanes[s.lane]],
  ['started',s.at],['took',age(s.secs)],
  ['ended',s.kind],['exit',s.outcome],['last words',s.last??'-'],['log',s.log??'-'],
  ['cost',s.cost_usd==null?'-':'$'+s.cost_usd.toFixed(2)],
  ['tokens',s.input_tokens==null?'-':s.input_tokens+' in, '+(s.output_tokens??0)+' out']];
 D.innerHTML='<dl>'+rows.map(([k,v])=>'<dt>'+k+'</dt><dd>'+esc(v)+'</dd>').join('')+'</dl>';
});
document.documentElement.dataset.rendered=performance.now().toFixed(1);
";

/// Escape text for HTML (element content and quoted attributes).
pub(super) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn dur(secs: f64) -> String {
    Age(std::time::Duration::from_secs_f64(secs.max(0.0))).to_string()
}

fn money(usd: Option<f64>) -> String {
    usd.map_or("-".to_owned(), |c| format!("${c:.2}"))
}

fn tokens(n: Option<u64>) -> String {
    n.map_or("-".to_owned(), |n| n.to_string())
}

impl Page<'_> {
    /// `t` (seconds since the epoch) in the page's time zone, as `fmt`.
    fn time(&self, t: f64, fmt: &str) -> String {
        jiff::Timestamp::from_millisecond((t * 1000.0) as i64)
            .map(|ts| ts.to_zoned(self.tz.clone()).strftime(fmt).to_string())
            .unwrap_or_default()
    }

    /// The x of time `t` in the plot.
    fn x(&self, t: f64) -> f64 {
        let span = self.night.span().max(1.0);
        GUTTER + (t - self.night.start) / span * (WIDTH - GUTTER - 10.0)
    }

    /// The whole page.
    pub fn render(&self) -> String {
        let n = self.night;
        let mut h = String::with_capacity(256 + n.sessions.len() * 420);
        let title = format!(
            "farm report: {} to {}",
            self.time(n.start, "%Y-%m-%d %H:%M"),
            self.time(n.end, "%Y-%m-%d %H:%M %Z")
        );
        let _ = write!(
            h,
            "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n\
             <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
             style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n\
             <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\n\
             <title>{}</title><style>{CSS}</style></head><body>\n<h1>{}</h1>\n\
             <p class=\"sub\">{}; made {} by farm {}</p>\n",
            esc(&title),
            esc(&title),
            esc(&self.scope),
            esc(&self.time(self.made, "%Y-%m-%d %H:%M %Z")),
            env!("CARGO_PKG_VERSION"),
        );
        if let Some(needs) = self.needs {
            h.push_str(&needs.html());
        }
        self.cards(&mut h);
        h.push_str("<h2>Sessions by agent</h2>\n");
        self.legend(&mut h);
        self.lanes(&mut h);
        h.push_str("<div id=\"detail\">Click a bar to see its session.</div>\n");
        h.push_str("<h2>Tasks done, and agents busy</h2>\n");
        self.curve(&mut h);
        self.critical(&mut h);
        self.tables(&mut h);
        let data = json!({
            "start": n.start,
            "lanes": n.lanes,
            "sessions": n.sessions.iter().enumerate().map(|(i, s)| json!({
                "lane": s.lane, "task": s.task, "attempt": s.attempt,
                "start": ((s.start - n.start) * 1000.0).round() / 1000.0,
                // In the page's zone, as every time it shows (the browser's
                // own zone may be another).
                "at": self.time(s.start, "%Y-%m-%d %H:%M:%S %Z"),
                "secs": (s.secs * 1000.0).round() / 1000.0,
                "kind": s.kind.label(), "outcome": s.outcome, "log": s.log,
                "cost_usd": s.cost_usd, "input_tokens": s.input_tokens,
                "output_tokens": s.output_tokens,
                "last": self.last_words.get(&i),
            })).collect::<Vec<_>>(),
        });
        // `<` escaped: the JSON cannot close its script element.
        let data = data.to_string().replace('<', "\\u003c");
        let _ = write!(
            h,
            "<script type=\"application/json\" id=\"night\">{data}</script>\n\
             <script>{SCRIPT}</script>\n</body></html>\n"
        );
        h
    }

    fn cards(&self, h: &mut String) {
        let n = self.night;
        let count = |k: Kind| n.counts.get(&k).copied().unwrap_or(0);
        let waited: f64 = n.waits.iter().map(|w| w.end - w.start).sum();
        let busy = if n.lanes.is_empty() || n.span() <= 0.0 {
            0.0
        } else {
            n.total.secs / (n.lanes.len() as f64 * n.span()) * 100.0
        };
        let cards = [
            ("sessions", n.total.sessions.to_string(), "sessions"),
            ("done", n.done.len().to_string(), "tasks done"),
            ("failed", count(Kind::Failed).to_string(), "failed sessions"),
            ("timed-out", count(Kind::TimedOut).to_string(), "timed out"),
            ("rescued", count(Kind::Rescued).to_string(), "rescued"),
            ("merges", count(Kind::Merge).to_string(), "merge sessions"),
            (
                "limited",
                (count(Kind::UsageLimit) + count(Kind::ApiError)).to_string(),
                "usage limits, API errors",
            ),
            ("waited", dur(waited), "waiting (limits, breaker)"),
            (
                "queue",
                queue_waits(&n.queued),
                "in the merge queue (median, longest)",
            ),
            ("span", dur(n.span()), "the night"),
            ("busy", format!("{busy:.0}%"), "of agent time in sessions"),
            ("cost", money(n.total.cost_usd), "cost, as the CLIs said"),
            (
                "tokens",
                match (n.total.input_tokens, n.total.output_tokens) {
                    (None, None) => "-".to_owned(),
                    (i, o) => format!("{} / {}", tokens(i), tokens(o)),
                },
                "tokens in / out",
            ),
        ];
        h.push_str("<div class=\"cards\">");
        for (id, value, what) in cards {
            let _ = write!(
                h,
                "<div class=\"card\" id=\"total-{id}\"><b>{}</b><span>{}</span></div>",
                esc(&value),
                esc(what)
            );
        }
        h.push_str("</div>\n");
    }

    fn legend(&self, h: &mut String) {
        h.push_str("<div class=\"legend\">");
        for k in Kind::ALL {
            let _ = write!(
                h,
                "<span><i class=\"{}\"></i>{} ({})</span>",
                k.class(),
                k.label(),
                self.night.counts.get(&k).copied().unwrap_or(0)
            );
        }
        let _ = writeln!(
            h,
            "<span><i class=\"wl\"></i>usage limit or API error wait</span>\
             <span><i class=\"wb\"></i>{}</span>\
             <span>dashed outline: on the critical path</span></div>",
            Why::Breaker.label()
        );
    }

    /// The step between time ticks that gives at most a dozen.
    fn tick_step(&self) -> f64 {
        const STEPS: [f64; 14] = [
            1.0, 5.0, 15.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 10800.0,
            21600.0, 43200.0,
        ];
        STEPS
            .iter()
            .copied()
            .find(|s| self.night.span() / s <= 12.0)
            .unwrap_or(86400.0)
    }

    /// Time ticks, [`Page::tick_step`] apart.
    fn ticks(&self) -> Vec<f64> {
        let n = self.night;
        let step = self.tick_step();
        let mut t = (n.start / step).ceil() * step;
        let mut out = Vec::new();
        while t <= n.end {
            out.push(t);
            t += step;
        }
        out
    }

    fn axis(&self, h: &mut String, top: f64, bottom: f64) {
        // Seconds whenever ticks fall between minutes: labelled to the
        // minute, ticks 15 s apart read `21:46 21:46 21:47`.
        let fmt = if self.tick_step() < 60.0 {
            "%H:%M:%S"
        } else {
            "%H:%M"
        };
        for t in self.ticks() {
            let x = self.x(t);
            if x > WIDTH - 28.0 {
                continue; // its label would be cut at the edge
            }
            let _ = write!(
                h,
                "<line class=\"grid\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{top}\" y2=\"{bottom}\"/>\
                 <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                bottom + 14.0,
                self.time(t, fmt)
            );
        }
    }

    fn lanes(&self, h: &mut String) {
        let n = self.night;
        let height = n.lanes.len() as f64 * LANE + AXIS;
        let crit: std::collections::HashSet<&str> = match &self.critical {
            Ok((chain, _)) => chain.iter().map(String::as_str).collect(),
            Err(_) => Default::default(),
        };
        let _ = write!(
            h,
            "<svg id=\"lanes\" viewBox=\"0 0 {WIDTH} {height}\" role=\"img\" \
             aria-label=\"sessions of each agent over time\">\
             <defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" \
             patternTransform=\"rotate(45)\"><rect width=\"3\" height=\"6\" fill=\"#b9a7e6\"/></pattern>\
             <pattern id=\"hatch2\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" \
             patternTransform=\"rotate(45)\"><rect width=\"3\" height=\"6\" fill=\"#e6a7a7\"/></pattern></defs>"
        );
        self.axis(h, 0.0, height - AXIS);
        for (i, lane) in n.lanes.iter().enumerate() {
            let _ = write!(
                h,
                "<text class=\"lane\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                GUTTER - 8.0,
                i as f64 * LANE + LANE / 2.0 + 4.0,
                esc(lane)
            );
        }
        for w in &n.waits {
            let (x, y) = (self.x(w.start), w.lane as f64 * LANE + (LANE - BAR) / 2.0);
            let width = (self.x(w.end) - x).max(1.0);
            let class = if w.why == Why::Breaker {
                "w breaker"
            } else {
                "w"
            };
            let _ = write!(
                h,
                "<rect class=\"{class}\" x=\"{x:.1}\" y=\"{y:.1}\" width=\"{width:.1}\" height=\"{BAR}\">\
                 <title>{} for {}</title></rect>",
                w.why.label(),
                dur(w.end - w.start)
            );
        }
        for (i, s) in n.sessions.iter().enumerate() {
            let (x, y) = (self.x(s.start), s.lane as f64 * LANE + (LANE - BAR) / 2.0);
            let width = (self.x(s.start + s.secs) - x).max(1.5);
            let c = if crit.contains(s.task.as_str()) {
                " crit"
            } else {
                ""
            };
            let attempt = s
                .attempt
                .map_or(String::new(), |a| format!(" · attempt {a}"));
            let _ = write!(
                h,
                "<rect class=\"b {}{c}\" data-i=\"{i}\" x=\"{x:.1}\" y=\"{y:.1}\" width=\"{width:.1}\" \
                 height=\"{BAR}\"><title>{}{attempt} · {} · {}</title></rect>",
                s.kind.class(),
                esc(&s.task),
                dur(s.secs),
                s.kind.label()
            );
            // The task's name on its bar, where the bar holds it whole.
            if width >= s.task.chars().count() as f64 * LABEL_CHAR + 8.0 {
                let _ = write!(
                    h,
                    "<text class=\"bt\" x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                    x + 4.0,
                    y + BAR / 2.0 + 3.5,
                    esc(&s.task)
                );
            }
        }
        h.push_str("</svg>\n");
    }

    /// The cumulative tasks-done curve and the number of agents in a
    /// session, on the lanes' time axis.
    fn curve(&self, h: &mut String) {
        let n = self.night;
        let plot = CURVE - AXIS;
        let total = n.done.len().max(1) as f64;
        let lanes = n.lanes.len().max(1) as f64;
        let y_done = |k: usize| 6.0 + (plot - 6.0) * (1.0 - k as f64 / total);
        let y_busy = |k: f64| 6.0 + (plot - 6.0) * (1.0 - k / lanes);
        let _ = write!(
            h,
            "<svg id=\"curve\" viewBox=\"0 0 {WIDTH} {CURVE}\" role=\"img\" \
             aria-label=\"tasks done over time\">"
        );
        self.axis(h, 0.0, plot);
        let _ = write!(
            h,
            "<text x=\"{:.1}\" y=\"14\" text-anchor=\"end\">{} done</text>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">0</text>",
            GUTTER - 8.0,
            n.done.len(),
            GUTTER - 8.0,
            plot
        );
        let mut d = format!("M{:.1},{:.1}", self.x(n.start), y_done(0));
        for (k, (at, _)) in n.done.iter().enumerate() {
            let x = self.x(*at);
            let _ = write!(d, "H{x:.1}V{:.1}", y_done(k + 1));
        }
        let _ = write!(d, "H{:.1}", self.x(n.end));
        let _ = write!(
            h,
            "<path class=\"curve\" d=\"{d}\"><title>tasks done</title></path>"
        );
        // Agents in a session, averaged over buckets of the night: a line
        // that moves at every session's start and end is noise at 2,000.
        let buckets = 240usize;
        let width = n.span().max(1.0) / buckets as f64;
        let mut busy = vec![0.0f64; buckets];
        for s in &n.sessions {
            let (from, to) = (s.start - n.start, s.start + s.secs - n.start);
            let first = ((from / width).floor().max(0.0) as usize).min(buckets - 1);
            let last = ((to / width).floor().max(0.0) as usize).min(buckets - 1);
            for (b, slot) in busy.iter_mut().enumerate().take(last + 1).skip(first) {
                let (lo, hi) = (b as f64 * width, (b + 1) as f64 * width);
                *slot += (to.min(hi) - from.max(lo)).max(0.0) / width;
            }
        }
        let mut d = String::new();
        for (b, avg) in busy.iter().enumerate() {
            let x = self.x(n.start + b as f64 * width);
            let c = if b == 0 { 'M' } else { 'L' };
            let _ = write!(
                d,
                "{c}{x:.1},{:.1}H{:.1}",
                y_busy(*avg),
                self.x(n.start + (b + 1) as f64 * width)
            );
        }
        let _ = write!(
            h,
            "<path class=\"busy\" d=\"{d}\"><title>agents in a session, on average (of {})</title></path></svg>\n\
             <div class=\"legend\"><span><i class=\"done\"></i>tasks done (0 to {})</span>\
             <span><i class=\"merge\"></i>agents in a session, on average (dashed; 0 to {})</span></div>\n",
            n.lanes.len(),
            n.done.len(),
            n.lanes.len()
        );
    }

    fn critical(&self, h: &mut String) {
        h.push_str("<h2>Critical path</h2>\n");
        match &self.critical {
            Ok((chain, secs)) if !chain.is_empty() => {
                let _ = writeln!(
                    h,
                    "<p>The longest chain of tasks each waiting for the one before, by the \
                     time of their sessions: <b>{}</b> of sessions; no number of agents ends \
                     the night sooner.</p><p class=\"path\" id=\"critical\">{}</p>",
                    dur(*secs),
                    chain.iter().map(|t| esc(t)).collect::<Vec<_>>().join(" → ")
                );
            }
            Ok(_) => h.push_str("<p>No task ran this night.</p>\n"),
            Err(why) => {
                let _ = writeln!(h, "<p>Unknown: {}.</p>", esc(why));
            }
        }
    }

    fn tables(&self, h: &mut String) {
        let n = self.night;
        let mut by_agent_kind: Vec<[usize; 8]> = vec![[0; 8]; n.lanes.len()];
        for s in &n.sessions {
            by_agent_kind[s.lane][s.kind as usize] += 1;
        }
        let spent = |s: &Spent| {
            format!(
                "<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>",
                s.sessions,
                dur(s.secs),
                money(s.cost_usd),
                tokens(s.input_tokens),
                tokens(s.output_tokens)
            )
        };
        let head =
            "<th>sessions</th><th>time</th><th>cost</th><th>tokens in</th><th>tokens out</th>";
        let _ = write!(
            h,
            "<h2>By agent</h2>\n<table id=\"by-agent\"><tr><th>agent</th>{head}\
             <th>done</th><th>failed</th></tr>"
        );
        for (i, lane) in n.lanes.iter().enumerate() {
            let s = n.by_agent.get(lane).cloned().unwrap_or_default();
            let k = by_agent_kind[i];
            let _ = write!(
                h,
                "<tr><td>{}</td>{}<td>{}</td><td>{}</td></tr>",
                esc(lane),
                spent(&s),
                k[Kind::Done as usize],
                k[Kind::Failed as usize] + k[Kind::TimedOut as usize]
            );
        }
        let _ = write!(
            h,
            "</table>\n<h2>By agent CLI</h2>\n<table id=\"by-cli\"><tr><th>CLI</th>{head}</tr>"
        );
        for (cli, s) in &n.by_cli {
            let _ = write!(h, "<tr><td>{}</td>{}</tr>", esc(cli), spent(s));
        }
        let mut tasks: Vec<(&String, &Spent)> = n.by_task.iter().collect();
        tasks.sort_by(|a, b| b.1.secs.total_cmp(&a.1.secs).then(a.0.cmp(b.0)));
        let head = format!("{head}<th>outcome</th>");
        let _ = write!(
            h,
            "</table>\n<h2>By task</h2>\n<p class=\"sub\">{} tasks, longest first; \
             the outcome is the task's state on the board now.</p>\
             <table id=\"by-task\"><tr><th>task</th>{head}</tr>",
            tasks.len()
        );
        const SHOWN: usize = 30;
        for (i, (task, s)) in tasks.iter().enumerate() {
            if i == SHOWN {
                let _ = write!(
                    h,
                    "</table><details><summary>{} more</summary><table><tr><th>task</th>{head}</tr>",
                    tasks.len() - SHOWN
                );
            }
            let outcome = self.outcomes.get(*task).map_or("-", String::as_str);
            let _ = write!(
                h,
                "<tr><td>{}</td>{}<td class=\"outcome {}\">{}</td></tr>",
                esc(task),
                spent(s),
                esc(outcome),
                esc(outcome)
            );
        }
        h.push_str("</table>");
        if tasks.len() > SHOWN {
            h.push_str("</details>");
        }
        h.push('\n');
    }
}

/// The merge queue's waits, as a card says them: the median and the
/// longest; `-` for a night with no gated change.
fn queue_waits(waits: &[f64]) -> String {
    if waits.is_empty() {
        return "-".to_owned();
    }
    let mut sorted = waits.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    let longest = sorted[sorted.len() - 1];
    format!("{} / {}", dur(median), dur(longest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::night::{Session, Wait};

    fn night() -> Night {
        let session = |lane, task: &str, start, secs, kind| Session {
            lane,
            task: task.into(),
            attempt: Some(1),
            start,
            secs,
            kind,
            outcome: "success".into(),
            log: Some("/state/logs/a/<x>.log".into()),
            cost_usd: Some(0.5),
            input_tokens: Some(10),
            output_tokens: Some(3),
        };
        let mut n = Night {
            start: 1_000.0,
            end: 4_600.0,
            lanes: vec!["a".into(), "b".into()],
            sessions: vec![
                session(0, "t1", 1_010.0, 600.0, Kind::Done),
                session(1, "t<2>", 1_020.0, 900.0, Kind::Failed),
                session(1, "t3", 2_000.0, 300.0, Kind::Merge),
            ],
            waits: vec![Wait {
                lane: 0,
                start: 2_000.0,
                end: 2_600.0,
                why: Why::UsageLimit,
            }],
            done: vec![(1_610.0, "t1".into())],
            queued: vec![4.0, 95.0, 3.0],
            ..Night::default()
        };
        for s in n.sessions.clone() {
            n.total.add(&s);
            *n.counts.entry(s.kind).or_default() += 1;
            n.by_task.entry(s.task.clone()).or_default().add(&s);
        }
        n
    }

    fn page(n: &Night) -> String {
        Page {
            night: n,
            scope: "the last night".into(),
            critical: Ok((vec!["t1".into(), "t3".into()], 900.0)),
            tz: TimeZone::UTC,
            made: 5_000.0,
            needs: None,
            outcomes: BTreeMap::from([("t<2>".to_owned(), "failed".to_owned())]),
            last_words: BTreeMap::from([(1, "I give up <here>".to_owned())]),
        }
        .render()
    }

    #[test]
    fn every_session_is_a_bar_and_nothing_is_loaded_from_elsewhere() {
        let n = night();
        let h = page(&n);
        assert_eq!(h.matches("<rect class=\"b ").count(), 3);
        assert_eq!(h.matches("<rect class=\"w").count(), 1);
        assert!(h.contains("class=\"b done crit\" data-i=\"0\""), "{h}");
        assert!(h.contains("class=\"b failed\" data-i=\"1\""));
        // Names are escaped, in the bars and in the embedded JSON.
        assert!(h.contains("<title>t&lt;2&gt; · attempt 1 · 15m · failed</title>"));
        assert!(!h.contains("t<2>"));
        assert!(h.contains("\\u003cx>.log"));
        assert!(h.contains("id=\"total-sessions\"><b>3</b>"));
        assert!(h.contains("id=\"total-cost\"><b>$1.50</b>"));
        assert!(h.contains("id=\"total-queue\"><b>4s / 1m35s</b>"), "{h}");
        assert!(h.contains("t1 → t3"));
        // The axis is in the page's zone: ticks every 5 minutes over an hour.
        assert!(h.contains(">00:20</text>"), "{h}");
        // Nothing the page could fetch: no URL but the SVG namespace-free
        // markup, and a policy that forbids every load.
        assert!(!h.contains("http://") && !h.contains("https://"));
        assert!(!h.contains(" src="));
        assert!(h.contains("default-src 'none'"));
    }

    /// Regression: a night of two or three minutes had ticks every 15
    /// seconds labelled to the minute: `21:46 21:46 21:47 …`. Whatever the
    /// span, no two labels of the axis are the same.
    #[test]
    fn the_time_axis_repeats_no_label() {
        for span in [30.0, 90.0, 150.0, 170.0, 600.0, 5_000.0] {
            let n = Night {
                start: 1_000.0,
                end: 1_000.0 + span,
                ..Night::default()
            };
            let h = page(&n);
            let lanes = h.split("id=\"lanes\"").nth(1).unwrap();
            let lanes = lanes.split("</svg>").next().unwrap();
            let labels: Vec<&str> = lanes
                .split("text-anchor=\"middle\">")
                .skip(1)
                .map(|t| t.split('<').next().unwrap())
                .collect();
            let unique: std::collections::BTreeSet<&&str> = labels.iter().collect();
            assert!(labels.len() > 1, "{span}: {labels:?}");
            assert_eq!(unique.len(), labels.len(), "{span}: {labels:?}");
        }
    }

    /// Regression: the panel of a clicked bar showed its start in the
    /// browser's zone (`toLocaleString`) while the page says its times are
    /// in the page's (UTC here). The start is given in the page's zone.
    #[test]
    fn a_bars_panel_says_its_start_in_the_pages_zone() {
        let h = page(&night());
        assert!(!h.contains("toLocale"), "the browser's zone is used");
        // t1 started at 1_010 s after the epoch.
        assert!(h.contains("\"at\":\"1970-01-01 00:16:50 UTC\""), "{h}");
    }

    /// A bar wide enough for its task's name carries it; a narrow one does
    /// not (its name is in its tooltip and panel). "By task" says how each
    /// task stands; a failed bar's panel has the agent's last words.
    #[test]
    fn bars_name_their_tasks_where_they_fit_and_tasks_say_their_outcome() {
        let mut n = night();
        n.sessions.push(Session {
            lane: 0,
            task: "a-task-with-a-long-name".into(),
            start: 4_590.0,
            secs: 5.0,
            ..n.sessions[0].clone()
        });
        let h = page(&n);
        assert!(h.contains("<text class=\"bt\""), "{h}");
        assert!(h.contains(">t1</text>"), "{h}");
        assert!(!h.contains(">a-task-with-a-long-name</text>"), "{h}");
        assert!(h.contains("<th>outcome</th>"), "{h}");
        assert!(
            h.contains("<td class=\"outcome failed\">failed</td>"),
            "{h}"
        );
        assert!(h.contains("<td class=\"outcome -\">-</td>"), "{h}");
        assert!(h.contains("\"last\":\"I give up \\u003chere>\""), "{h}");
        assert!(h.contains("['last words',s.last??'-']"));
    }

    #[test]
    fn an_empty_night_renders() {
        let n = Night::default();
        let h = Page {
            night: &n,
            scope: "nothing".into(),
            critical: Err("the board cannot be read".into()),
            tz: TimeZone::UTC,
            made: 0.0,
            needs: None,
            outcomes: BTreeMap::new(),
            last_words: BTreeMap::new(),
        }
        .render();
        assert!(h.contains("Unknown: the board cannot be read."));
        assert!(h.ends_with("</html>\n"));
    }
}
