//! Landing a rescue branch on the hub's branch by hand (`farm rescue apply
//! --land`): the work as it was kept, brought onto the branch by a
//! session's own integration ([`integrate`]) — rebased, or merged when
//! that conflicts; through the test gate and the merge queue when there is
//! a gate; pushed under the task's claim — in a clone of its own.
//!
//! What differs from a session's landing is said by [`Work::Rescue`]: a
//! conflict ends it (no merge session), and the task stays where the branch
//! has it unless the landing is to finish it (`done`): the rescue's own
//! changes to its task's file (a session whose tests turned red had moved
//! it to done) are put back first.
//!
//! Nothing is lost when a landing is cut short: the rescue branch is left
//! as it was until the work is on the branch, and the clone is made afresh
//! by the next landing — the commits in it are the rescue's, on the hub
//! already (recovering them would push them to a rescue branch once more).

use crate::board::paths::Place;
use crate::board::{Task, paths};
use crate::claims::Held;
use crate::claims::host::Here;
use crate::claims::record::timestamp;
use crate::error::Error;
use crate::run::clone::PrivateClone;
use crate::run::gate::Verdict;
use crate::run::integrate::{Integrated, Work, integrate};
use crate::run::interrupt::{Halt, Interrupt};
use crate::run::landing;
use crate::run::slot::Slot;
use crate::run::state::Run;
use crate::run::turn::Turn;

/// How landing a rescue branch ended.
#[derive(Debug)]
pub enum Landed {
    /// On the branch: its tip now.
    Pushed { commit: String },
    /// It conflicts with the branch in these files: nothing pushed.
    Conflict(Vec<String>),
    /// The test gate kept it off the branch: why, and an `ERROR:` line
    /// each for the tests it turns red.
    Red { why: String, errors: Vec<String> },
    /// The test gate could not judge it (why).
    Untested(String),
    /// It changes what a session may not (farm's own files, other tasks).
    Refused(String),
    /// Its task went to done or failed on the branch meanwhile.
    Elsewhere(Place),
    /// The branch kept moving.
    Busy,
    /// The claim was taken away before the push (why).
    Lost(String),
}

/// Land rescue branch `rescue` (on the hub) on the hub's branch as agent
/// `name`, holding `held`, the claim of `task`; `done`: the task moves to
/// done with it, as a session's success moves it.
pub fn land(
    run: &Run,
    name: &str,
    task: &Task,
    held: &Held,
    rescue: &str,
    done: bool,
) -> Result<Landed, Error> {
    let dir = format!("land-{}", task.id);
    let path = run.state.join("clones").join(&dir);
    // A clone left by a landing cut short holds nothing the hub lacks.
    let _ = std::fs::remove_dir_all(&path);
    let clone = PrivateClone::prepare(&run.state, &run.hub, name, &dir, run.out)?;
    let landed = land_in(run, &clone, name, task, held, rescue, done);
    drop(clone);
    let _ = std::fs::remove_dir_all(&path);
    landed
}

fn land_in(
    run: &Run,
    clone: &PrivateClone,
    name: &str,
    task: &Task,
    held: &Held,
    rescue: &str,
    done: bool,
) -> Result<Landed, Error> {
    let base = clone.start_from(&run.hub, rescue)?;
    clone.undo_claim_tampering(&base, name)?;
    if !done {
        clone.keep_task_as_at(&base, &task.id)?;
    } else if !clone.dir().join(paths::done(&task.id)).is_file() {
        let result = format!(
            "Landed from `{rescue}` by {name}@{} with `farm rescue apply --land`, {}.",
            Here::current().host,
            timestamp(std::time::SystemTime::now()),
        );
        clone.mark_done_saying(task, name, &result)?;
    }
    let slot = Slot::default();
    let turn = Turn {
        run,
        clone,
        name,
        task,
        held,
        slot: &slot,
    };
    let integrated = match integrate(turn, &base, Work::Rescue { done }) {
        Ok(integrated) => integrated,
        Err(Halt::Interrupted(Interrupt::Lost(why))) => return Ok(Landed::Lost(why)),
        Err(Halt::Interrupted(Interrupt::Stopped)) => {
            return Err(Error::failure("the landing was stopped"));
        }
        Err(Halt::Failed(e)) => return Err(e),
    };
    Ok(match integrated {
        Integrated::Pushed => Landed::Pushed {
            commit: clone.head()?,
        },
        Integrated::Conflict(files) => Landed::Conflict(files),
        Integrated::Busy => Landed::Busy,
        Integrated::Gated(Verdict::Red { why, errors }) => Landed::Red { why, errors },
        Integrated::Gated(Verdict::Untested(why) | Verdict::Broken(why)) => Landed::Untested(why),
        Integrated::Gated(Verdict::Unqueued(why)) => {
            Landed::Untested(format!("the merge queue gave it up: {why}"))
        }
        Integrated::Gated(Verdict::Pass(_)) => {
            Landed::Untested("the test gate did not judge it".into())
        }
        Integrated::Elsewhere(place) => Landed::Elsewhere(place),
        Integrated::Refused(refused) => Landed::Refused(landing::describe(&refused)),
    })
}
