"""``python -m kvtable.engines``: each engine's integration, version read against, profile and faults."""

from kvtable.engines import ENGINES, load_engine

for _name in ENGINES:
    _module = load_engine(_name)
    print(f"{_name}: {_module.ENGINE.distribution} {_module.ENGINE.version}, profile {_module.ENGINE.profile}")
    for _fault, _what in _module.FAULTS.items():
        print(f"  --fault {_fault}: {_what}")
