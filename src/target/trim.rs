//! Backward elimination after a target's prefix search: the search raises the `k` worst of a
//! ranking, and a ranking made one point (or op) at a time misorders some of them — a raise
//! another one made unneeded, or one that cost many MACs for little. Each raise is tried
//! lowered in turn, and stays lowered where the goal still holds without it.
//!
//! With a goal that can only get worse as raises are lowered, what is left is minimal: no
//! single raise can be lowered more (a raise kept was needed when tried, and lowering others
//! after it only made it more so).
//!
//! Then [`exchange`]: a floated op that costs more MACs than a few cheaper ones that would make
//! up for it is traded for them.

use super::noise;

/// Lowers the raises of `kept` one at a time, in the order `order` gives (positions in
/// `kept`), to the first of `lowered(raise)` under which `score` still reaches `target`:
/// `None` in that list drops the raise, `Some(r)` replaces it by a smaller one. `best` is the
/// score of `kept` as given, and becomes the score of what is left.
///
/// ```text
/// kept  [a:float, b:int16, c:int16]   order [2, 1, 0]
/// try   [a:float, b:int16]            holds  -> c dropped
/// try   [a:float]                     misses -> b kept
/// try   [b:int16]                     misses
/// try   [a:int16, b:int16]            holds  -> a lowered to int16
/// ```
pub(super) fn trim<T: Clone, E>(
    kept: Vec<T>,
    order: &[usize],
    lowered: &dyn Fn(&T) -> Vec<Option<T>>,
    score: &mut dyn FnMut(&[T]) -> Result<f64, E>,
    target: f64,
    best: &mut f64,
) -> Result<Vec<T>, E> {
    let mut slots: Vec<Option<T>> = kept.into_iter().map(Some).collect();
    for &pos in order {
        let Some(current) = slots.get(pos).cloned().flatten() else {
            continue;
        };
        for lower in lowered(&current) {
            let mut trial = slots.clone();
            trial[pos] = lower;
            let raises: Vec<T> = trial.iter().flatten().cloned().collect();
            let db = score(&raises)?;
            if db >= target {
                slots = trial;
                *best = db;
                break;
            }
        }
    }
    Ok(slots.into_iter().flatten().collect())
}

/// Exchanges after a trim: each floated op (of `kept`, indices below `n`), the most MACs
/// first, is tried int8 again with a few cheaper ops floated in its place, where that keeps
/// fewer MACs float and the goal still holds. A trim leaves no single op that can be lowered,
/// yet one op may cost more MACs than the ops that would make up for it.
///
/// The ops left int8 are each scored floated on top of `kept` (what floating one more sheds
/// there), and the stand-ins for an op are chosen by that gain per MAC until, summed as
/// noise, it covers what lowering the op costs (`score` of `kept` without it); the exchange is
/// then scored and kept where it holds. `tries` ops at most, of cost at least `min_cost`.
///
/// ```text
/// kept [big]  (cost 100)   others a (10), b (10), c (50)
/// without big: misses by 2e-4 of noise;  gains a 1.5e-4, b 1e-4, c 3e-4
/// stand-ins by gain per MAC: a, b  (2.5e-4 ≥ 2e-4, cost 20 < 100)  → try [a, b]: holds → kept
/// ```
#[allow(clippy::too_many_arguments)]
pub(super) fn exchange<E>(
    kept: Vec<usize>,
    n: usize,
    cost: &dyn Fn(usize) -> u64,
    score: &mut dyn FnMut(&[usize]) -> Result<f64, E>,
    target: f64,
    best: &mut f64,
    tries: usize,
    min_cost: u64,
) -> Result<Vec<usize>, E> {
    let mut kept = kept;
    let mut order: Vec<usize> = kept.iter().copied().filter(|&f| cost(f) >= min_cost).collect();
    order.sort_by(|&a, &b| cost(b).cmp(&cost(a)).then(a.cmp(&b)));
    order.truncate(tries);
    if order.is_empty() {
        return Ok(kept);
    }
    // what floating each op left int8 sheds on top of `kept` (noise, linear)
    let mut gains: Vec<(usize, f64)> = Vec::new();
    for g in (0..n).filter(|g| !kept.contains(g)) {
        let mut trial = kept.clone();
        trial.push(g);
        gains.push((g, noise(*best) - noise(score(&trial)?)));
    }
    for f in order {
        let without: Vec<usize> = kept.iter().copied().filter(|&k| k != f).collect();
        let db_without = score(&without)?;
        if db_without >= target {
            // it holds without the op (an exchange before made it unneeded): lowered
            kept = without;
            *best = db_without;
            continue;
        }
        let short = noise(db_without) - noise(target);
        let mut candidates: Vec<(usize, f64)> = gains.iter().copied().filter(|&(_, g)| g > 0.0).collect();
        candidates.sort_by(|a, b| {
            (b.1 / cost(b.0).max(1) as f64)
                .total_cmp(&(a.1 / cost(a.0).max(1) as f64))
                .then(a.0.cmp(&b.0))
        });
        let (mut covered, mut spent, mut stand_ins) = (0.0, 0u64, Vec::new());
        for (g, gain) in candidates {
            if covered >= short {
                break;
            }
            if spent + cost(g) < cost(f) {
                covered += gain;
                spent += cost(g);
                stand_ins.push(g);
            }
        }
        if covered < short {
            continue;
        }
        let mut trial = without;
        trial.extend(&stand_ins);
        let db = score(&trial)?;
        if db >= target {
            kept = trial;
            *best = db;
            gains.retain(|(g, _)| !stand_ins.contains(g));
        }
    }
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // a goal that each raise improves by its own gain, independently: monotone, as the trim
    // assumes
    fn additive(base: f64, gains: &[f64]) -> impl Fn(&[usize]) -> f64 + '_ {
        move |raises: &[usize]| base + raises.iter().map(|&i| gains[i]).sum::<f64>()
    }

    #[test]
    fn a_raise_another_made_unneeded_is_dropped() {
        // the prefix search raised 0, 1, 2; raise 2 alone reaches the target
        let gains = [1.0, 1.0, 5.0];
        let f = additive(25.0, &gains);
        let mut tried = 0;
        let mut score = |r: &[usize]| -> Result<f64, ()> {
            tried += 1;
            Ok(f(r))
        };
        let mut best = f(&[0, 1, 2]);
        let kept = trim(vec![0, 1, 2], &[0, 1, 2], &|_| vec![None], &mut score, 30.0, &mut best).unwrap();
        assert_eq!(kept, vec![2]);
        assert_eq!(best, 30.0);
        assert_eq!(tried, 3);
    }

    #[test]
    fn a_float_raise_falls_back_to_a_smaller_one() {
        // (index, level): level 2 = float, 1 = int16; the gain is the level
        let score_of = |r: &[(usize, u8)]| 27.0 + r.iter().map(|&(_, l)| l as f64).sum::<f64>();
        let mut score = |r: &[(usize, u8)]| -> Result<f64, ()> { Ok(score_of(r)) };
        let lowered = |&(i, l): &(usize, u8)| {
            let mut v = vec![None];
            if l == 2 {
                v.push(Some((i, 1)));
            }
            v
        };
        let mut best = score_of(&[(0, 2), (1, 2)]);
        let kept = trim(vec![(0, 2), (1, 2)], &[0, 1], &lowered, &mut score, 30.0, &mut best).unwrap();
        assert_eq!(kept, vec![(0, 1), (1, 2)]);
        assert_eq!(best, 30.0);
    }

    #[test]
    fn an_error_stops_the_trim() {
        let mut score = |_: &[usize]| -> Result<f64, &str> { Err("evaluation failed") };
        let mut best = 31.0;
        let r = trim(vec![0, 1], &[1, 0], &|_| vec![None], &mut score, 30.0, &mut best);
        assert_eq!(r, Err("evaluation failed"));
        assert_eq!(best, 31.0);
    }

    // a goal whose noise each floated op lowers by its own amount, independently
    fn noise_goal(base: f64, sheds: &[f64]) -> impl Fn(&[usize]) -> f64 + '_ {
        move |floated: &[usize]| {
            let left = noise(base) - floated.iter().map(|&i| sheds[i]).sum::<f64>();
            -10.0 * left.max(1e-12).log10()
        }
    }

    #[test]
    fn a_costly_float_op_is_exchanged_for_cheaper_ones() {
        // the example of `exchange`: all int8 at 29 dB, the target 30 dB; op 0 (cost 100)
        // alone reaches it, ops 1 and 2 (cost 10 each) together do too, op 3 (cost 50) does
        let base = 29.0;
        let need = noise(base) - noise(30.0);
        let sheds = [need * 1.1, need * 0.6, need * 0.5, need * 1.2];
        let costs = [100u64, 10, 10, 50];
        let f = noise_goal(base, &sheds);
        let mut best = f(&[0]);
        let mut score = |r: &[usize]| -> Result<f64, ()> { Ok(f(r)) };
        let mut kept = exchange(vec![0], 4, &|i| costs[i], &mut score, 30.0, &mut best, 8, 0).unwrap();
        kept.sort();
        assert_eq!(kept, vec![1, 2]);
        assert!(best >= 30.0 && best == f(&kept));
        // an op no cheaper set can stand in for stays
        let mut best = f(&[1, 2]);
        let kept = exchange(vec![1, 2], 4, &|i| costs[i], &mut score, 30.0, &mut best, 8, 0).unwrap();
        assert_eq!(kept, vec![1, 2]);
    }

    proptest! {
        // under a goal of additive noise the exchange keeps the goal and never floats more
        #[test]
        fn an_exchange_holds_and_floats_no_more(
            sheds in proptest::collection::vec(0.0f64..4e-4, 2..10),
            costs in proptest::collection::vec(1u64..1000, 10),
            base in 25.0f64..29.5,
        ) {
            let target = 30.0;
            let n = sheds.len();
            let f = noise_goal(base, &sheds);
            let all: Vec<usize> = (0..n).collect();
            prop_assume!(f(&all) >= target);
            // a trimmed start: everything, then each op dropped where the goal holds
            let mut kept = all.clone();
            for i in 0..n {
                let fewer: Vec<usize> = kept.iter().copied().filter(|&k| k != i).collect();
                if f(&fewer) >= target {
                    kept = fewer;
                }
            }
            let cost_of = |k: &[usize]| k.iter().map(|&i| costs[i]).sum::<u64>();
            let before = cost_of(&kept);
            let mut best = f(&kept);
            let mut score = |r: &[usize]| -> Result<f64, ()> { Ok(f(r)) };
            let out = exchange(kept, n, &|i| costs[i], &mut score, target, &mut best, 16, 0).unwrap();
            prop_assert!(f(&out) >= target);
            prop_assert_eq!(best, f(&out));
            prop_assert!(cost_of(&out) <= before, "{} > {}", cost_of(&out), before);
        }

        // under a monotone goal the trim keeps the goal and leaves no single raise it could drop
        #[test]
        fn what_is_left_holds_and_is_minimal(
            gains in proptest::collection::vec(0.0f64..4.0, 1..12),
            base in 10.0f64..30.0,
            rotate in 0usize..12,
        ) {
            let target = 30.0;
            let all: Vec<usize> = (0..gains.len()).collect();
            let f = additive(base, &gains);
            prop_assume!(f(&all) >= target);
            let mut order = all.clone();
            order.rotate_left(rotate % gains.len());
            let mut best = f(&all);
            let mut score = |r: &[usize]| -> Result<f64, ()> { Ok(f(r)) };
            let kept = trim(all.clone(), &order, &|_| vec![None], &mut score, target, &mut best).unwrap();
            prop_assert!(f(&kept) >= target);
            prop_assert_eq!(best, f(&kept));
            for i in 0..kept.len() {
                let mut fewer = kept.clone();
                fewer.remove(i);
                prop_assert!(f(&fewer) < target, "raise {} of {:?} could go", kept[i], kept);
            }
        }
    }
}
