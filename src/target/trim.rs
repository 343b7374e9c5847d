//! Backward elimination after a target's prefix search: the search raises the `k` worst of a
//! ranking, and a ranking made one point (or op) at a time misorders some of them — a raise
//! another one made unneeded, or one that cost many MACs for little. Each raise is tried
//! lowered in turn, and stays lowered where the goal still holds without it.
//!
//! With a goal that can only get worse as raises are lowered, what is left is minimal: no
//! single raise can be lowered more (a raise kept was needed when tried, and lowering others
//! after it only made it more so).

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

    proptest! {
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
