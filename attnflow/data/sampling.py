"""Samplers of the data modules' loaders."""


def eval_sampler(dataset):
    """The sampler of a validation/test loader: under DDP each item on exactly one rank
    (Lightning's injected DistributedSampler pads the ranks by repeating items, which would count
    them twice in the metrics); ``None`` (the default order) in a single process."""
    import torch

    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return None
    from pytorch_lightning.overrides.distributed import UnrepeatedDistributedSampler

    return UnrepeatedDistributedSampler(dataset, shuffle=False)
