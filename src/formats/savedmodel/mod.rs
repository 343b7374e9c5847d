//! TensorFlow SavedModel directories. So far: [`bundle`], the reader of the variables
//! checkpoint (`variables/variables.index` and its data shards). Reading `saved_model.pb`
//! into a TF-dialect module is not there yet (issue 9): `quantir` names a SavedModel
//! directory as unsupported.

pub mod bundle;
