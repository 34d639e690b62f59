"""The engine: the decode loop (decode, with its settings and checks in run and the
verify step in verify), the acceptance rules (acceptance: greedy and the exact
sampling rule, each a callable the loop is handed), the target (target), the
events each step yields (events), the statistics read from them (metrics) and the
verify cost a cost-aware tree is sized by (verifycost).

Nothing here imports the lab (gumiho.lab) or the app: experiments hand the loop
what they need (a rule, ``records=True``)."""
