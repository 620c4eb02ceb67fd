from landscape.scan_snap import task as task_lib


def classes(**overrides):
    fields = dict(
        num_last=2,
        num_next_per_last=1,
        num_common=10,
        num_common_per_last=0,
        num_distinct_per_next=10,
        common_unnormalized_prob=1.0,
        distinct_unnormalized_min=0.1,
        distinct_unnormalized_max=1.0,
        seq_len=128,
    )
    fields.update(overrides)
    return task_lib.sequence_classes(**fields)


def syn_small():
    return classes()


def syn_medium(num_last):
    return classes(num_last=num_last, num_next_per_last=2)
