// `import SignetReverify` is all a verify-only app writes (the `SignetReverify` product): the
// public API of the layers below it — trust policies and keys, the manifest and the
// attributes, `SignetError` — comes with it, as `import Signet` brings every layer.
@_exported import SignetCore
@_exported import SignetCrypto
@_exported import SignetManifest
