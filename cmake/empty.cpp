// Keeps a layer library non-empty while the layer has no sources yet.
namespace hr {
void hr_layer_anchor() {}
}  // namespace hr
