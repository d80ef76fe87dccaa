"""A model's variables: which parameters are sparse tables and which are dense, checked for
what the paths can honour."""

import torch
import torch.nn as nn

from parallax.torch import _dynamic, _tables
from parallax.torch._context import error


class Table:
    """An nn.Embedding / nn.EmbeddingBag with sparse=True: a sparse variable; or a
    px.DynamicEmbedding(Bag): a dynamic table (no row count)."""

    def __init__(self, name, module):
        self.name = name  # the weight's name in the model's state_dict, e.g. "inp.weight"
        self.module = module
        self.dynamic = _dynamic.is_dynamic(module)
        self.rows = None if self.dynamic else module.num_embeddings
        self.dim = module.embedding_dim
        self.bag = module.bag if self.dynamic else isinstance(module, nn.EmbeddingBag)
        self.padding_idx = module.padding_idx
        self.var = None  # the Session's variable id
        # A dynamic table of a job without a coordinator: the process-local table, the
        # gradients of the step not yet applied, the learning rate over the configured one.
        self.local = None
        self.pending = []
        self.lr_scale = 1.0


class Dense:
    """Any other parameter: a dense variable."""

    def __init__(self, name, param):
        self.name, self.param = name, param
        self.var = None
        self.host_view = None  # (data_ptr, numpy view) of a CPU parameter, for the step's copy


def _refused(where, name, what, todo):
    return error("INVALID_ARGUMENT", f"{where}: embedding table '{name}' {what}, which Parallax "
                 f"cannot honour: {todo}")


def _check_table(where, name, module):
    if module.max_norm is not None:
        raise _refused(where, name, f"has max_norm={module.max_norm} (rows renormalised in "
                       "place at lookup)", "drop max_norm, or keep the table dense (sparse=False)")
    if module.scale_grad_by_freq:
        raise _refused(where, name, "has scale_grad_by_freq=True (scaled by frequencies in one "
                       "rank's batch, not the global batch)", "drop scale_grad_by_freq")
    if module.weight.dtype != torch.float32:
        raise _refused(where, name, f"is {module.weight.dtype}", "use float32")
    if not module.weight.requires_grad:
        raise _refused(where, name, "is frozen (requires_grad=False)",
                       "keep frozen tables dense (sparse=False)")
    if module.weight.device.type == "meta" and _tables.table_init(module.weight) is None:
        raise error("INVALID_ARGUMENT",
                    f"{where}: embedding table '{name}' is on the meta device but was not built "
                    "inside parallax.torch.build(), so its initialisation cannot be known; build "
                    "the model inside `with parallax.torch.build():`, or on the CPU to start "
                    "from its own values")


def collect(model, where):
    """The variables of `model` in registration order (its named_parameters order), refusing
    what the paths cannot honour: tables with max_norm or scale_grad_by_freq, a table's weight
    shared with another module (tied weights), non-float32 parameters."""
    tables = {}
    dynamic = {}  # the placeholder weight of each dynamic table -> its module
    for module_name, module in model.named_modules():
        if isinstance(module, (nn.Embedding, nn.EmbeddingBag)) and module.sparse:
            tables[id(module.weight)] = (module_name, module)
        elif _dynamic.is_dynamic(module):
            dynamic[id(module.weight)] = module
    owners = {}  # every name a parameter is reachable under
    for module_name, module in model.named_modules(remove_duplicate=False):
        for local, param in module._parameters.items():
            if param is not None:
                name = f"{module_name}.{local}" if module_name else local
                owners.setdefault(id(param), [])
                if name not in owners[id(param)]:
                    owners[id(param)].append(name)
    variables = []
    for name, param in model.named_parameters():
        if id(param) in dynamic:
            variables.append(Table(name, dynamic[id(param)]))
            continue
        if id(param) in tables:
            module_name, module = tables[id(param)]
            if len(owners[id(param)]) > 1:
                raise _refused(where, name, "shares its weight with " +
                               ", ".join(repr(n) for n in owners[id(param)] if n != name) +
                               " (tied weights)", "give each module its own weight")
            _check_table(where, name, module)
            variables.append(Table(name, module))
            continue
        if param.device.type == "meta":
            raise error("INVALID_ARGUMENT", f"{where}: parameter '{name}' is on the meta device; "
                        "only sparse embedding tables (sparse=True) may be")
        if param.dtype != torch.float32:
            raise error("INVALID_ARGUMENT", f"{where}: parameter '{name}' is {param.dtype}; "
                        "Parallax trains float32 parameters (call model.float() first)")
        if not param.requires_grad:
            continue  # frozen: not a variable, stays as built on every rank
        variables.append(Dense(name, param))
    return variables
