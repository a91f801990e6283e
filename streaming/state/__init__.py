"""The job's state: where each state key's `SpaceMatcher` is kept between batches.

- `store`: a key's state variables in Spark's state store (`meta`, `snapshot`,
  `log`) with the worker cache in front: the matcher a batch runs on (cached,
  caught up or rebuilt), and the batch's changes saved;
- `change_log`: the held-set changes since the snapshot, an entry a batch, in
  two generations, and when the log becomes a snapshot;
- `codec`: snapshot bytes ↔ matcher: the format version, then a zstd-compressed
  pickle;
- `migrations`: every upgrade of what an earlier format wrote (renamed classes,
  old object states, old log entries);
- `cache`: the per-worker-process cache of matchers, bounded by the records
  they hold;
- `reader`: the checkpoint's committed state, read with Spark's state data source.
"""
