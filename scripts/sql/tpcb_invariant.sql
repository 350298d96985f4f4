-- TPC-B invariant for pgbench's built-in "tpcb-like" workload.
--
-- Every committed pgbench transaction adds the same delta to one account, one teller
-- and one branch and inserts one history row with that delta. If the database kept
-- exactly the committed transactions (no torn or lost one, nothing applied twice):
--   sum(bbalance) = sum(tbalance) = sum(abalance) = sum(history.delta)
-- and, per entity, each balance equals the sum of its history deltas. pgbench draws
-- aid, tid and bid independently, so a teller's history rows may name any branch:
-- the per-entity checks use history.bid / tid / aid, never the teller's own bid.
-- Row counts must match the scale: 1 : 10 : 100000 branches : tellers : accounts.
--
-- Prints one row: ok (t/f) and the numbers behind it, '|'-separated with psql -At.
WITH sums AS (
    SELECT
        (SELECT coalesce(sum(bbalance), 0) FROM pgbench_branches) AS branch_sum,
        (SELECT coalesce(sum(tbalance), 0) FROM pgbench_tellers) AS teller_sum,
        (SELECT coalesce(sum(abalance), 0) FROM pgbench_accounts) AS account_sum,
        (SELECT coalesce(sum(delta), 0) FROM pgbench_history) AS history_sum,
        (SELECT count(*) FROM pgbench_history) AS history_rows,
        (SELECT count(*) FROM pgbench_branches) AS branches,
        (SELECT count(*) FROM pgbench_tellers) AS tellers,
        (SELECT count(*) FROM pgbench_accounts) AS accounts
),
bad_branches AS (
    SELECT count(*) AS n
    FROM pgbench_branches b
    FULL JOIN (SELECT bid, sum(delta) AS s FROM pgbench_history GROUP BY bid) h USING (bid)
    WHERE b.bid IS NULL OR b.bbalance <> coalesce(h.s, 0)
),
bad_tellers AS (
    SELECT count(*) AS n
    FROM pgbench_tellers t
    FULL JOIN (SELECT tid, sum(delta) AS s FROM pgbench_history GROUP BY tid) h USING (tid)
    WHERE t.tid IS NULL OR t.tbalance <> coalesce(h.s, 0)
),
bad_accounts AS (
    SELECT count(*) AS n
    FROM pgbench_accounts a
    FULL JOIN (SELECT aid, sum(delta) AS s FROM pgbench_history GROUP BY aid) h USING (aid)
    WHERE a.aid IS NULL OR a.abalance <> coalesce(h.s, 0)
)
SELECT
    (s.branch_sum = s.teller_sum AND s.teller_sum = s.account_sum
        AND s.account_sum = s.history_sum
        AND s.tellers = 10 * s.branches AND s.accounts = 100000 * s.branches
        AND s.branches > 0
        AND bb.n = 0 AND bt.n = 0 AND ba.n = 0) AS ok,
    s.branch_sum, s.teller_sum, s.account_sum, s.history_sum, s.history_rows,
    s.branches, s.tellers, s.accounts,
    bb.n AS bad_branches, bt.n AS bad_tellers, ba.n AS bad_accounts
FROM sums s, bad_branches bb, bad_tellers bt, bad_accounts ba;
