// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "Signet",
    products: [
        .library(name: "Signet", targets: ["Signet"]),
        .executable(name: "signet", targets: ["signet"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
    ],
    targets: [
        // System libraries. `providers` is only a hint for the error message; the module
        // maps carry `link "crypto"` / `link "zip"` so a missing -dev package fails loudly.
        .systemLibrary(
            name: "COpenSSL",
            pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"])]
        ),
        .systemLibrary(
            name: "CZip",
            pkgConfig: "libzip",
            providers: [.apt(["libzip-dev"])]
        ),
        // C functions for what Swift cannot call: OpenSSL macros and variadics,
        // <sys/xattr.h> and GNU-only declarations such as renameat2.
        .target(
            name: "CSignetShims",
            dependencies: ["COpenSSL"]
        ),
        .target(
            name: "Signet",
            dependencies: ["COpenSSL", "CZip", "CSignetShims"]
        ),
        .executableTarget(
            name: "signet",
            dependencies: [
                "Signet",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // Helpers both test targets use: running peers (openssl, python3, the signet binary),
        // temporary directories.
        .target(
            name: "SignetTestSupport",
            path: "Tests/SignetTestSupport"
        ),
        .testTarget(
            name: "SignetTests",
            dependencies: ["Signet", "SignetTestSupport"],
            resources: [.copy("Fixtures"), .copy("Vectors"), .copy("Hostile")]
        ),
        .testTarget(
            name: "SignetCLITests",
            // Depending on the executable makes `swift test` build it; the tests run the binary.
            dependencies: ["signet", "SignetTestSupport"]
        ),
    ]
)
