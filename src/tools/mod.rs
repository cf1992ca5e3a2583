//! The tools the model can call, and the registry that advertises them.
