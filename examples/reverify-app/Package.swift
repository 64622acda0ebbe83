// swift-tools-version:6.0
// An app outside Signet's package that only re-verifies installed trees: it depends on the
// `SignetReverify` library product alone (the verify-only closure: core, crypto, manifest,
// reverify), so its binary links neither libzip nor libcurl. `scripts/example-app.sh` builds it
// and checks its `ldd`; README's "Using the library" shows the same dependency by URL.
import PackageDescription

let package = Package(
    name: "reverify-app",
    dependencies: [
        // This checkout. From elsewhere: .package(url: "https://github.com/OWNER/signet", from: "1.0.0")
        .package(name: "Signet", path: "../.."),
    ],
    targets: [
        .executableTarget(
            name: "reverify-app",
            dependencies: [.product(name: "SignetReverify", package: "Signet")]
        ),
    ]
)
