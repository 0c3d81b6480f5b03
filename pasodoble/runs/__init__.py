"""The commands that run things: `train` (the recipe, building roles, resume), `demo`, `experiment`, `export`,
`config show` (`config_show`), `layout` (`layout_cmd`) and the notes a run leaves (`run_notes`). Nothing in the
library imports this package."""
