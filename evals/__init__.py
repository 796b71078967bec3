"""`parley eval`: measure answering methods (single, self-consistency, debate, panel, round table) on a task,
with bootstrap intervals and per-item cost, and the duel judge's position bias."""
