"""Engineers: what the optimizer shows an engineer, and the engineers that need no model.

One module, one job (each imports only those above it in this list):

- ``actions`` — names actions without knowing the environment (the discriminating field);
- ``contract`` — the :class:`Engineer` protocol, the failure packet it reads and the
  proposals it returns;
- ``evidence`` — reads an experiment's sessions back from the journal as traces;
- ``families`` — argument fields (what tells options of one action apart) and fact families
  (facts indexed by an argument: ``lit_3``, ``lit_7``, a state list read by position);
- ``packets`` — builds the failure packet from those traces (clusters, hook views, contrasts);
- ``grammar`` — the mining grammar: atoms, rules, the space a search samples, and the hook code
  a rule is written as;
- ``mining`` — the mining engineer: seeds rules from the packet, scores and ranks them;
- ``scripted`` — the scripted engineer: gives the answers it was given.

The model engineer is ``envharness.llm.ModelEngineer`` (a layer below). Everything public is
re-exported by ``envharness.optimizer``.
"""
