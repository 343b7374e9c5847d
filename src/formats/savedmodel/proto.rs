//! The TensorFlow protobuf messages a SavedModel is made of, written as prost structs from
//! the field numbers of TensorFlow's `.proto` files (`saved_model.proto`, `meta_graph.proto`,
//! `graph.proto`, `node_def.proto`, `attr_value.proto`, `tensor.proto`, `function.proto`,
//! `op_def.proto`, `saved_object_graph.proto`, `trackable_object_graph.proto`).
//!
//! Only the fields quantir reads are declared; prost skips the others. A `oneof` is declared
//! as one optional field per member: decoding is the same and the reader asks which is set.

use prost::Message;
use std::collections::HashMap;

/// SavedModel: the file `saved_model.pb`.
#[derive(Clone, PartialEq, Message)]
pub struct SavedModel {
    #[prost(int64, tag = "1")]
    pub saved_model_schema_version: i64,
    #[prost(message, repeated, tag = "2")]
    pub meta_graphs: Vec<MetaGraphDef>,
}

#[derive(Clone, PartialEq, Message)]
pub struct MetaGraphDef {
    #[prost(message, optional, tag = "1")]
    pub meta_info_def: Option<MetaInfoDef>,
    #[prost(message, optional, tag = "2")]
    pub graph_def: Option<GraphDef>,
    #[prost(map = "string, message", tag = "5")]
    pub signature_def: HashMap<String, SignatureDef>,
    #[prost(message, optional, tag = "7")]
    pub object_graph_def: Option<SavedObjectGraph>,
}

#[derive(Clone, PartialEq, Message)]
pub struct MetaInfoDef {
    #[prost(string, tag = "1")]
    pub meta_graph_version: String,
    /// The definitions of every op the graph uses (output arities, types, attr defaults).
    #[prost(message, optional, tag = "2")]
    pub stripped_op_list: Option<OpList>,
    #[prost(string, repeated, tag = "4")]
    pub tags: Vec<String>,
    #[prost(string, tag = "5")]
    pub tensorflow_version: String,
    /// Attributes equal to their OpDef default were removed from the nodes.
    #[prost(bool, tag = "7")]
    pub stripped_default_attrs: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct OpList {
    #[prost(message, repeated, tag = "1")]
    pub op: Vec<OpDef>,
}

#[derive(Clone, PartialEq, Message)]
pub struct SignatureDef {
    #[prost(map = "string, message", tag = "1")]
    pub inputs: HashMap<String, TensorInfo>,
    #[prost(map = "string, message", tag = "2")]
    pub outputs: HashMap<String, TensorInfo>,
    #[prost(string, tag = "3")]
    pub method_name: String,
}

/// TensorInfo: a dense tensor of the graph (`name` = "node:index"); sparse and composite
/// encodings are recognised only to be refused.
#[derive(Clone, PartialEq, Message)]
pub struct TensorInfo {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(int32, tag = "2")]
    pub dtype: i32,
    #[prost(message, optional, tag = "3")]
    pub tensor_shape: Option<TensorShapeProto>,
    #[prost(bytes = "vec", optional, tag = "4")]
    pub coo_sparse: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "5")]
    pub composite_tensor: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TensorShapeProto {
    #[prost(message, repeated, tag = "2")]
    pub dim: Vec<TensorShapeDim>,
    #[prost(bool, tag = "3")]
    pub unknown_rank: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct TensorShapeDim {
    /// -1 for an unknown size.
    #[prost(int64, tag = "1")]
    pub size: i64,
    #[prost(string, tag = "2")]
    pub name: String,
}

impl TensorShapeProto {
    /// The dims (None = unknown size), or None when the rank is unknown.
    pub fn dims(&self) -> Option<Vec<Option<i64>>> {
        (!self.unknown_rank).then(|| self.dim.iter().map(|d| (d.size >= 0).then_some(d.size)).collect())
    }
}

#[derive(Clone, PartialEq, Message)]
pub struct GraphDef {
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeDef>,
    #[prost(message, optional, tag = "2")]
    pub library: Option<FunctionDefLibrary>,
    #[prost(message, optional, tag = "4")]
    pub versions: Option<VersionDef>,
}

#[derive(Clone, PartialEq, Message)]
pub struct VersionDef {
    #[prost(int32, tag = "1")]
    pub producer: i32,
    #[prost(int32, tag = "2")]
    pub min_consumer: i32,
    #[prost(int32, repeated, tag = "3")]
    pub bad_consumers: Vec<i32>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NodeDef {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub op: String,
    /// "node", "node:k" (graph), "node:out_arg:k", "arg" (function body), "^node" (control).
    #[prost(string, repeated, tag = "3")]
    pub input: Vec<String>,
    #[prost(string, tag = "4")]
    pub device: String,
    #[prost(map = "string, message", tag = "5")]
    pub attr: HashMap<String, AttrValue>,
}

/// AttrValue (a oneof: exactly one member is set).
#[derive(Clone, PartialEq, Message)]
pub struct AttrValue {
    #[prost(message, optional, tag = "1")]
    pub list: Option<ListValue>,
    #[prost(bytes = "vec", optional, tag = "2")]
    pub s: Option<Vec<u8>>,
    #[prost(int64, optional, tag = "3")]
    pub i: Option<i64>,
    #[prost(float, optional, tag = "4")]
    pub f: Option<f32>,
    #[prost(bool, optional, tag = "5")]
    pub b: Option<bool>,
    #[prost(int32, optional, tag = "6")]
    pub r#type: Option<i32>,
    #[prost(message, optional, tag = "7")]
    pub shape: Option<TensorShapeProto>,
    #[prost(message, optional, tag = "8")]
    pub tensor: Option<TensorProto>,
    #[prost(string, optional, tag = "9")]
    pub placeholder: Option<String>,
    #[prost(message, optional, tag = "10")]
    pub func: Option<NameAttrList>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ListValue {
    #[prost(bytes = "vec", repeated, tag = "2")]
    pub s: Vec<Vec<u8>>,
    #[prost(int64, repeated, tag = "3")]
    pub i: Vec<i64>,
    #[prost(float, repeated, tag = "4")]
    pub f: Vec<f32>,
    #[prost(bool, repeated, tag = "5")]
    pub b: Vec<bool>,
    #[prost(int32, repeated, tag = "6")]
    pub r#type: Vec<i32>,
    #[prost(message, repeated, tag = "7")]
    pub shape: Vec<TensorShapeProto>,
    #[prost(message, repeated, tag = "8")]
    pub tensor: Vec<TensorProto>,
    #[prost(message, repeated, tag = "9")]
    pub func: Vec<NameAttrList>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NameAttrList {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(map = "string, message", tag = "2")]
    pub attr: HashMap<String, AttrValue>,
}

/// TensorProto (TensorFlow's): raw `tensor_content` or one typed repeated field.
#[derive(Clone, PartialEq, Message)]
pub struct TensorProto {
    #[prost(int32, tag = "1")]
    pub dtype: i32,
    #[prost(message, optional, tag = "2")]
    pub tensor_shape: Option<TensorShapeProto>,
    #[prost(bytes = "vec", tag = "4")]
    pub tensor_content: Vec<u8>,
    /// f16 and bf16 values as their 16-bit patterns.
    #[prost(int32, repeated, tag = "13")]
    pub half_val: Vec<i32>,
    #[prost(float, repeated, tag = "5")]
    pub float_val: Vec<f32>,
    #[prost(double, repeated, tag = "6")]
    pub double_val: Vec<f64>,
    /// int32, int16, int8, uint8, uint16.
    #[prost(int32, repeated, tag = "7")]
    pub int_val: Vec<i32>,
    #[prost(bytes = "vec", repeated, tag = "8")]
    pub string_val: Vec<Vec<u8>>,
    #[prost(int64, repeated, tag = "10")]
    pub int64_val: Vec<i64>,
    #[prost(bool, repeated, tag = "11")]
    pub bool_val: Vec<bool>,
    #[prost(uint32, repeated, tag = "16")]
    pub uint32_val: Vec<u32>,
    #[prost(uint64, repeated, tag = "17")]
    pub uint64_val: Vec<u64>,
}

#[derive(Clone, PartialEq, Message)]
pub struct FunctionDefLibrary {
    #[prost(message, repeated, tag = "1")]
    pub function: Vec<FunctionDef>,
}

#[derive(Clone, PartialEq, Message)]
pub struct FunctionDef {
    #[prost(message, optional, tag = "1")]
    pub signature: Option<OpDef>,
    #[prost(message, repeated, tag = "3")]
    pub node_def: Vec<NodeDef>,
    /// Output arg name → "node:out_arg:k" or an input arg name.
    #[prost(map = "string, string", tag = "4")]
    pub ret: HashMap<String, String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct OpDef {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, repeated, tag = "2")]
    pub input_arg: Vec<ArgDef>,
    #[prost(message, repeated, tag = "3")]
    pub output_arg: Vec<ArgDef>,
    #[prost(message, repeated, tag = "4")]
    pub attr: Vec<AttrDef>,
    #[prost(bool, tag = "17")]
    pub is_stateful: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct ArgDef {
    #[prost(string, tag = "1")]
    pub name: String,
    /// A fixed DataType, else 0 and one of the attrs below names the type.
    #[prost(int32, tag = "3")]
    pub r#type: i32,
    #[prost(string, tag = "4")]
    pub type_attr: String,
    /// The arg is a list of this many tensors of one type.
    #[prost(string, tag = "5")]
    pub number_attr: String,
    /// The arg is a list of tensors of these types.
    #[prost(string, tag = "6")]
    pub type_list_attr: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct AttrDef {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub r#type: String,
    #[prost(message, optional, tag = "3")]
    pub default_value: Option<AttrValue>,
}

/// SavedObjectGraph: the Python object tree saved with the model; node 0 is the root.
#[derive(Clone, PartialEq, Message)]
pub struct SavedObjectGraph {
    #[prost(message, repeated, tag = "1")]
    pub nodes: Vec<SavedObject>,
    #[prost(map = "string, message", tag = "2")]
    pub concrete_functions: HashMap<String, SavedConcreteFunction>,
}

#[derive(Clone, PartialEq, Message)]
pub struct SavedObject {
    #[prost(message, repeated, tag = "1")]
    pub children: Vec<ObjectReference>,
    /// Set when the object is a variable.
    #[prost(message, optional, tag = "7")]
    pub variable: Option<SavedVariable>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ObjectReference {
    #[prost(int32, tag = "1")]
    pub node_id: i32,
    #[prost(string, tag = "2")]
    pub local_name: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct SavedVariable {
    #[prost(int32, tag = "1")]
    pub dtype: i32,
    #[prost(message, optional, tag = "2")]
    pub shape: Option<TensorShapeProto>,
    #[prost(string, tag = "6")]
    pub name: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct SavedConcreteFunction {
    /// The object-graph nodes bound to the function's last inputs (its captures), in order.
    #[prost(int32, repeated, tag = "2")]
    pub bound_inputs: Vec<i32>,
}

/// TrackableObjectGraph: the checkpoint's object tree (tensor `_CHECKPOINTABLE_OBJECT_GRAPH`),
/// which names each object's checkpoint keys.
#[derive(Clone, PartialEq, Message)]
pub struct TrackableObjectGraph {
    #[prost(message, repeated, tag = "1")]
    pub nodes: Vec<TrackableObject>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TrackableObject {
    #[prost(message, repeated, tag = "1")]
    pub children: Vec<ObjectReference>,
    #[prost(message, repeated, tag = "2")]
    pub attributes: Vec<SerializedTensor>,
}

#[derive(Clone, PartialEq, Message)]
pub struct SerializedTensor {
    /// "VARIABLE_VALUE" for a variable's value.
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub full_name: String,
    #[prost(string, tag = "3")]
    pub checkpoint_key: String,
}
