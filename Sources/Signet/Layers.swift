// The layers below the umbrella, re-exported: `import Signet` keeps giving an app every
// public type, wherever it lives (docs/ARCHITECTURE.md draws the graph).
@_exported import SignetCore
@_exported import SignetCrypto
@_exported import SignetManifest
@_exported import SignetReverify
@_exported import SignetArchive
@_exported import SignetNetwork
@_exported import SignetPackage
@_exported import SignetInstall
@_exported import SignetTUF
@_exported import SignetPublish
@_exported import SignetUpdate
