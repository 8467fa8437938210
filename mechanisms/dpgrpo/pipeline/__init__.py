"""The command-line DP-GRPO run (`privcheck run dp-grpo`), apart from the trainer and the checks' bindings.

One module per job:

* `setup`    — validated inputs (`RunSetup`, `setup_run`), before any model is built or file written;
* `inputs`   — models, prompts, private records and the hashes the artifacts record;
* `arm`      — one arm of one replicate (`run_arm`);
* `artifact` — the run artifact (`privcheck.dpgrpo.run/1`, docs/dpgrpo.md);
* `compare`  — the compare artifact, the report and the plots;
* `launch`   — the launcher's environment (`torchrun`, `accelerate launch`) and the process group;
* `run`      — the entry point (`run_dpgrpo`).

Nothing is imported here, so that `import mechanisms.dpgrpo.pipeline.launch` (as the command line does) does not
import torch; import the modules by path.
"""

__all__: list[str] = []
