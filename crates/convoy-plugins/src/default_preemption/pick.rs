//! Choosing one candidate node (upstream `pickOneNodeForPreemption`,
//! v1.37.2, with no `OrderedScoreFuncs`).

use super::Candidate;

/// Upstream's criteria, in order; each keeps only the candidates with the
/// highest score, and the first that leaves one decides:
///
/// 1. fewest PDB violations;
/// 2. lowest priority of the most important victim;
/// 3. smallest sum of victim priorities, each shifted by 2^31 so that more
///    victims always cost more;
/// 4. fewest victims;
/// 5. latest start among the victims of the highest priority (their
///    earliest start time; a pod not started counts as now);
///
/// then the first remaining candidate (candidates come non-violating
/// first, in the order the dry run found them).
///
/// # Panics
/// If `candidates` is empty.
pub fn pick_one_node(mut candidates: Vec<Candidate>) -> Candidate {
    assert!(!candidates.is_empty(), "picking among no candidates");
    let criteria: [fn(&Candidate) -> i128; 5] = [
        |c| -(c.num_pdb_violations as i128),
        |c| -i128::from(c.victims.first().map_or(0, |v| v.priority)),
        |c| -c.victims.iter().map(|v| i128::from(v.priority) + (1i128 << 31)).sum::<i128>(),
        |c| -(c.victims.len() as i128),
        earliest_start_of_most_important,
    ];
    for score in criteria {
        if candidates.len() == 1 {
            break;
        }
        let best = candidates.iter().map(score).max().expect("not empty");
        candidates.retain(|c| score(c) == best);
    }
    candidates.swap_remove(0)
}

/// Upstream `GetEarliestPodStartTime`: the earliest start among the
/// victims with the highest priority.
fn earliest_start_of_most_important(c: &Candidate) -> i128 {
    let Some(top) = c.victims.iter().map(|v| v.priority).max() else { return i128::MIN };
    c.victims.iter().filter(|v| v.priority == top).map(|v| v.start_key()).min().unwrap_or(i128::MIN)
}
