//===- ModelMappingTest.cpp - initializer raw data left out of the parse --===//
//
// stripInitializerData must hand protobuf exactly the model minus the top-level
// initializers' raw_data, say where each raw_data was, and refuse what is not wire
// format (the importer then parses the file the ordinary way and reports it).
//
//===----------------------------------------------------------------------===//
#include "compiler/Import/ModelMapping.h"

#include <onnx/onnx_pb.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <unistd.h>

namespace {

onnx::ModelProto sampleModel() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("test");
  m.add_opset_import()->set_version(17);
  onnx::GraphProto *g = m.mutable_graph();
  g->set_name("g");
  onnx::NodeProto *n = g->add_node();
  n->set_op_type("Add");
  n->add_input("w");
  n->add_input("b");
  n->add_output("y");
  // A Constant node's tensor attribute keeps its raw data (only initializers move).
  onnx::AttributeProto *a = n->add_attribute();
  a->set_name("value");
  a->mutable_t()->set_raw_data(std::string(8, '\x07'));
  onnx::TensorProto *w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(3);
  w->set_raw_data(std::string("\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c", 12));
  onnx::TensorProto *b = g->add_initializer(); // typed data: no region
  b->set_name("b");
  b->set_data_type(onnx::TensorProto::FLOAT);
  b->add_dims(2);
  b->add_float_data(1.5f);
  b->add_float_data(-2.0f);
  onnx::TensorProto *big = g->add_initializer(); // over 127 bytes: multi-byte lengths
  big->set_name("big");
  big->set_data_type(onnx::TensorProto::UINT8);
  big->add_dims(300);
  std::string bytes(300, 0);
  for (int i = 0; i < 300; ++i)
    bytes[i] = char(i * 7);
  big->set_raw_data(bytes);
  g->add_output()->set_name("y");
  return m;
}

TEST(ModelMapping, StripsInitializerRawDataAndRecordsWhereItWas) {
  onnx::ModelProto m = sampleModel();
  std::string wire = m.SerializeAsString();
  std::string stripped;
  std::vector<ortc::RawDataRegion> regions;
  ASSERT_TRUE(ortc::stripInitializerData(wire.data(), wire.size(), stripped, regions));
  ASSERT_EQ(regions.size(), 3u);
  EXPECT_TRUE(regions[0].present);
  EXPECT_FALSE(regions[1].present);
  EXPECT_TRUE(regions[2].present);
  EXPECT_EQ(wire.substr(regions[0].offset, regions[0].size), m.graph().initializer(0).raw_data());
  EXPECT_EQ(wire.substr(regions[2].offset, regions[2].size), m.graph().initializer(2).raw_data());

  onnx::ModelProto parsed;
  ASSERT_TRUE(parsed.ParseFromString(stripped));
  onnx::ModelProto expected = m;
  for (onnx::TensorProto &t : *expected.mutable_graph()->mutable_initializer())
    t.clear_raw_data();
  EXPECT_EQ(parsed.SerializeAsString(), expected.SerializeAsString());
  EXPECT_EQ(parsed.graph().node(0).attribute(0).t().raw_data(), std::string(8, '\x07'));
  EXPECT_LT(stripped.size(), wire.size() - 300);
}

TEST(ModelMapping, RefusesWhatIsNotWireFormat) {
  std::string wire = sampleModel().SerializeAsString();
  std::string stripped;
  std::vector<ortc::RawDataRegion> regions;
  for (size_t cut : {wire.size() - 1, wire.size() / 2, size_t(3)})
    EXPECT_FALSE(ortc::stripInitializerData(wire.data(), cut, stripped, regions)) << cut;
  std::string group = "\x0b"; // field 1, wire type 3 (start group): not in ONNX
  EXPECT_FALSE(ortc::stripInitializerData(group.data(), group.size(), stripped, regions));
  std::string badLength = "\x3a\xff\xff\xff\xff\x0f"; // graph of 4 GB in 6 bytes
  EXPECT_FALSE(ortc::stripInitializerData(badLength.data(), badLength.size(), stripped, regions));
  EXPECT_TRUE(ortc::stripInitializerData(wire.data(), 0, stripped, regions)); // empty message
  EXPECT_TRUE(stripped.empty());
}

TEST(ModelMapping, MapsAFileAndNamesWhatCannotBeMapped) {
  char path[] = "/tmp/ortc-mapping-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  std::string error;
  EXPECT_EQ(ortc::FileMapping::open(path, error), nullptr);
  EXPECT_EQ(error, "file is empty");
  {
    std::ofstream(path, std::ios::binary) << "abc";
  }
  auto mapped = ortc::FileMapping::open(path, error);
  ASSERT_NE(mapped, nullptr);
  EXPECT_EQ(std::string(mapped->data(), mapped->size()), "abc");
  std::remove(path);
  EXPECT_EQ(std::string(mapped->data(), mapped->size()), "abc"); // lives while mapped
  EXPECT_EQ(ortc::FileMapping::open("/nonexistent/x.onnx", error), nullptr);
  EXPECT_NE(error.find("cannot read file"), std::string::npos);
}

} // namespace
