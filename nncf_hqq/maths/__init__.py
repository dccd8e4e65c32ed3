"""Pure HQQ maths over NNCF's backend-agnostic tensors (``nncf.tensor``): no model, graph or backend imports."""
