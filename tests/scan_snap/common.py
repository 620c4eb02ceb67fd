from landscape.scan_snap import task as task_lib


def classes(**overrides):
    fields = dict(task_lib.SYN_SMALL)
    fields.update(overrides)
    return task_lib.sequence_classes(**fields)


def syn_small():
    return classes()


def syn_medium(num_last):
    return classes(num_last=num_last, num_next_per_last=2)
