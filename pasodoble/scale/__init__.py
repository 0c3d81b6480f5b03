"""Training on several processes: the collectives (`collectives`), the per-rank shares of a step (`data_parallel`),
the multi-GPU layout check (`layout`) and the sharding backends (`sharding`: ddp, fsdp2, deepspeed)."""
