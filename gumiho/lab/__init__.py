"""The teaching lab beside the engine: the losslessness experiment (lossless), the
acceptance rules that are wrong on purpose and the names of all rules (rules), and
the speed model that predicts a speedup from acceptance and cost (speedmodel).

The lab uses the engine (gumiho.engine) and hands its decode loop the rules it
tests, as callables; the engine never imports the lab."""
