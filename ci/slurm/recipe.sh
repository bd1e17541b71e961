#!/usr/bin/env bash
# ci/slurm/recipe.sh: prints the Slurm recipe of docs/scenarios.md, the sh
# block between <!-- slurm-recipe: begin ... --> and <!-- slurm-recipe: end -->
# without its list indentation, for ci/stages/slurm and ci/slurm-sweep-bench
# to run as written. Exits 1, naming what is wrong, when there is no such
# block or it lacks the sbatch --array and sbatch --dependency it is about.
set -euo pipefail
doc=$(dirname "$0")/../../docs/scenarios.md
recipe=$(awk '
/<!-- slurm-recipe: begin/ { inside = 1; next }
/<!-- slurm-recipe: end/ { inside = 0; done = 1; next }
inside && /^ *```/ { fence++; next }
inside && fence == 1 { sub(/^  /, ""); print }
END { if (!done || fence != 2) exit 1 }
' "$doc") || { echo "$doc: no sh block between <!-- slurm-recipe: begin --> and <!-- slurm-recipe: end -->" >&2; exit 1; }
if ! grep -q 'sbatch .*--array=' <<<"$recipe" || ! grep -q 'sbatch .*--dependency=' <<<"$recipe"; then
    echo "$doc: the Slurm recipe has no sbatch --array and sbatch --dependency:" >&2
    echo "$recipe" >&2
    exit 1
fi
echo "$recipe"
