"""A role (Proposer or Solver): the `Role` that generates and trains (`role`), LoRA adapters (`adapters`), two
adapters on one shared base (`shared_base`) and the model specs a recipe may name (`models`)."""
