//! oxtree's Rust core: the `oxtree._core` extension module.
//!
//! This file only declares the module: every function, class and constant Python sees is
//! listed below, in one place. The logic lives in modules named by noun.

mod algebra;
mod containers;
mod errors;
mod face;
mod ffi;
mod filter_jit;
mod graph;
mod invariant;
mod jax_registry;
mod key_classes;
mod kind;
mod path_text;
mod pattern;
mod plugins;
mod prefix;
mod registry;
mod spare;
mod treespec;
mod types;
mod walk;

use pyo3::prelude::*;

/// oxtree's Rust core. The main face's functions are here (`oxtree` re-exports them); the
/// JAX face's are in the submodule `jax_face` (`oxtree.tree_util` re-exports them).
// The walks read dicts with `PyDict_Next` and lists through borrowed items, with no
// critical sections: on a free-threaded CPython the module asks to keep the GIL on.
#[pymodule(gil_used = true)]
#[pyo3(module = "oxtree")]
mod _core {
    use super::*;

    // The main face: optree's names and signatures, dicts rebuilt in insertion order.
    #[pymodule_export]
    use crate::face::optree::{
        _flatten_one_level, _flatten_with_steps, _tree_flatten_jax_registry, all_leaves,
        tree_flatten, tree_flatten_with_keys, tree_flatten_with_path, tree_is_leaf, tree_leaves,
        tree_leaves_with_path, tree_map, tree_map_, tree_map_with_keys, tree_map_with_path,
        tree_paths, tree_structure, tree_unflatten,
    };

    // Selecting leaves by key-path pattern: the compiled patterns, and the main face's
    // functions over them.
    #[pymodule_export]
    use crate::face::optree::{tree_labels, tree_mask, tree_set_matching};
    #[pymodule_export]
    use crate::pattern::PathPattern;

    // Treespecs, and the function their pickles call to rebuild one.
    #[pymodule_export]
    use crate::treespec::{
        pickle::{rebuild_treespec, PyNode},
        PyTreeSpec,
    };

    // The registry of node types.
    #[pymodule_export]
    use crate::registry::{
        _attribute_fields, _register_dataclass_fields, _registrations, get_registry_size,
        is_dict_insertion_ordered, register_pytree_node, register_static, registered_types,
        set_dict_insertion_ordered, unregister_pytree_node,
    };

    // Whether the main face reads JAX's registry too (`oxtree.use_jax_registry`).
    #[pymodule_export]
    use crate::jax_registry::_use_jax_registry;

    // How the core classifies tuple subclasses (namedtuple, struct sequence).
    #[pymodule_export]
    use crate::types::{_tuple_fields, _tuple_kind};

    // JAX's key classes, and `keystr`.
    #[pymodule_export]
    use crate::key_classes::{keystr, DictKey, FlattenedIndexKey, GetAttrKey, SequenceKey};

    // Graphs: shared and cyclic references.
    #[pymodule_export]
    use crate::graph::{
        _graph_rebuild_steps, _rebuild_graphdef, graph_flatten, graph_unflatten, GraphDef,
    };
    // oxtree.jax.filter_jit's warm call.
    #[pymodule_export]
    use crate::filter_jit::FilterJitCore;
    // oxtree.Module: its aux data and the flatten and unflatten functions its classes are
    // registered with (walked natively).
    #[pymodule_export]
    use crate::treespec::module_node::{
        _module_flatten, _module_flatten_with_keys, _module_unflatten, ModuleDef,
    };

    // Prefix errors, in either face's words.
    #[pymodule_export]
    use crate::prefix::{_prefix_errors, PrefixError};

    // The tree algebra both faces share: broadcasting, reductions, transpose, a type's node
    // kind and rebuilding one registered node.
    #[pymodule_export]
    use crate::algebra::{
        _broadcast_common, _broadcast_prefix, _jax_only_node, _node_kind, _transpose_outputs,
        _tree_all, _tree_reduce, _tree_reduce_associative, _tree_transpose, _unflatten_node,
    };

    #[pymodule_export]
    const MAX_RECURSION_DEPTH: usize = crate::treespec::flatten::MAX_DEPTH;
    #[pymodule_export]
    const NONE_IS_LEAF: bool = true;
    #[pymodule_export]
    const NONE_IS_NODE: bool = false;
    #[pymodule_export]
    const GLOBAL_NAMESPACE: &str = "";
    // optree's flags for optional features of its build; oxtree has none of these (no
    // frozendict node kind, no per-interpreter registries, no pybind11).
    #[pymodule_export]
    const OPTREE_HAS_FROZENDICT: bool = false;
    #[pymodule_export]
    const OPTREE_HAS_SUBINTERPRETER_SUPPORT: bool = false;
    #[pymodule_export]
    const PYBIND11_HAS_NATIVE_ENUM: bool = false;
    #[pymodule_export]
    const PYBIND11_HAS_SUBINTERPRETER_SUPPORT: bool = false;

    /// The JAX face's entry points: JAX's signatures over the same walks, dicts rebuilt in
    /// sorted key order (`oxtree.tree_util` and `oxtree.tree` re-export them).
    #[pymodule(gil_used = true)]
    mod jax_face {
        #[pymodule_export]
        use crate::face::jax::{
            _flatten_with_path_in, _is_leaf, _set_jax_version, all_leaves,
            broadcast_flattened_prefix_with_treedef, tree_flatten, tree_flatten_with_path,
            tree_labels, tree_leaves, tree_leaves_with_path, tree_map, tree_map_with_path,
            tree_mask, tree_set_matching, tree_structure, tree_unflatten,
        };
    }

    /// What is known only at import: the interpreter's build, `PyTreeKind` (an `enum.IntEnum`
    /// made at import), and the module's own rebuild functions, kept for `__reduce__`.
    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        let py = m.py();
        // Facts of the interpreter this module was built for (and so is loaded into), under
        // optree's names: `sys.abiflags` has "d" for a debug build, "t" for a free-threaded one.
        let abiflags: String = py
            .import("sys")?
            .getattr("abiflags")
            .and_then(|f| f.extract())
            .unwrap_or_default();
        m.add("Py_DEBUG", abiflags.contains('d'))?;
        m.add("Py_GIL_DISABLED", abiflags.contains('t'))?;
        // Imported now, so that no walk needs to import it (a walk of plain leaves then runs no
        // Python code: see `flatten::leaf_sequence`).
        crate::types::collections(py);
        m.add("PyTreeKind", crate::kind::py_tree_kind(py)?)?;
        // Set once per process: a second initialisation (a reload) keeps the first module's
        // functions, which pickle still finds under the same names.
        let _ = crate::treespec::pickle::REBUILD.set(py, m.getattr("_rebuild_treespec")?.unbind());
        let _ = crate::graph::REBUILD.set(py, m.getattr("_rebuild_graphdef")?.unbind());
        let _ =
            crate::treespec::module_node::FLATTEN.set(py, m.getattr("_module_flatten")?.unbind());
        Ok(())
    }
}
