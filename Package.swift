// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "Signet",
    products: [
        .library(name: "Signet", targets: ["Signet"]),
        // For an app that only re-verifies installed files and trees: the verify-only closure
        // (core, crypto, manifest, reverify), which links neither libzip nor libcurl
        // (examples/reverify-app, a package of its own, checks its binary's ldd).
        .library(name: "SignetReverify", targets: ["SignetReverify"]),
        .executable(name: "signet", targets: ["signet"])
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        // Descriptors, errno and paths: one POSIX layer with EINTR retries and typed errors.
        .package(url: "https://github.com/apple/swift-system", from: "1.8.1"),
        // `swift package generate-documentation --target Signet`: the DocC catalog in
        // Sources/Signet/Signet.docc (CI builds it with warnings as errors).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
        // `signet update --config FILE`: TOML (`key = value`), parsed by toml++ through TOMLKit,
        // never by hand. The CLI's concern only: the library takes its options in code.
        .package(url: "https://github.com/LebJe/TOMLKit.git", from: "0.6.0")
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
        // libcurl (built on the same OpenSSL) for downloads; TLS policy is Signet's own. Its
        // header only: the library is loaded with dlopen on first use (CSignetCurl), so that
        // the commands that download nothing start without it. No pkgConfig, which would link
        // it (-lcurl); the header is libcurl4-openssl-dev's (scripts/install-deps.sh).
        .systemLibrary(
            name: "CCurl"
        ),
        // PKCS#11 types (p11-kit's pkcs11.h) for keys on tokens; the token's own module is
        // loaded with dlopen at run time, so nothing is linked.
        .systemLibrary(
            name: "CPKCS11",
            pkgConfig: "p11-kit-1",
            providers: [.apt(["libp11-kit-dev"])]
        ),
        // C functions for what Swift cannot call (macros, variadics, GNU-only declarations),
        // one module per C library, so that a target links only the library it uses.
        // OpenSSL's macros (stacks, BIO, error codes, EVP_RSA_gen).
        .target(
            name: "CSignetOpenSSL",
            dependencies: ["COpenSSL"]
        ),
        // Linux calls with no Swift declaration (renameat2, openat2, syncfs, FICLONE, memfd,
        // statfs, <sys/xattr.h>). No library.
        .target(
            name: "CSignetSystem"
        ),
        // libcurl's variadic setopt/getinfo, through the library loaded with dlopen on first use.
        .target(
            name: "CSignetCurl",
            dependencies: ["CCurl"]
        ),
        // zlib (which libzip is built on): raw inflate where Signet sees a stream's end, crc32,
        // and whether a small file is worth deflating.
        .target(
            name: "CSignetZlib",
            linkerSettings: [.linkedLibrary("z")]
        ),
        // The layers, lowest first; each imports only those below it (docs/ARCHITECTURE.md).
        // Core: errors and exit codes, descriptors and paths, atomic files, temporaries, locks.
        .target(
            name: "SignetCore",
            dependencies: [
                "COpenSSL", "CSignetOpenSSL", "CSignetSystem",
                .product(name: "SystemPackage", package: "swift-system")
            ]
        ),
        // Crypto: keys (files, PKCS#12, PKCS#11 tokens), digests, signing and verifying, trust
        // policies and sealed trust directories. OpenSSL only.
        .target(
            name: "SignetCrypto",
            dependencies: [
                "SignetCore",
                "COpenSSL", "CPKCS11", "CSignetOpenSSL",
                .product(name: "SystemPackage", package: "swift-system")
            ]
        ),
        // Manifest: the signed manifest (reader, writer, chunk indexes), the signature record
        // and extended attributes an installed tree carries, structured resources (JSON,
        // property lists). No archive, no network.
        .target(
            name: "SignetManifest",
            dependencies: [
                "SignetCore", "SignetCrypto",
                "COpenSSL", "CSignetZlib",
                .product(name: "SystemPackage", package: "swift-system")
            ]
        ),
        // Reverify: installed files and trees checked against the signatures and manifest they
        // carry. What an app that only re-verifies links: no libzip, no libcurl.
        .target(
            name: "SignetReverify",
            dependencies: [
                "SignetCore", "SignetCrypto", "SignetManifest",
                .product(name: "SystemPackage", package: "swift-system")
            ]
        ),
        // Archive: zip, read by Signet's own cross-checked central directory and libzip,
        // written by libzip; the inputs it reads from (a file, ranges of a remote one).
        .target(
            name: "SignetArchive",
            dependencies: [
                "SignetCore",
                "CZip", "CSignetZlib", "CSignetSystem",
                .product(name: "SystemPackage", package: "swift-system")
            ]
        ),
        // Network: HTTPS through libcurl (loaded on first use) under Signet's TLS policy (pinned
        // roots, keys and certificates checked inside OpenSSL's handshake), full downloads that
        // resume, range requests. It knows nothing of the package format: reading a package
        // through ranges and labelling a verified download are the package layer's.
        .target(
            name: "SignetNetwork",
            dependencies: [
                "SignetCore", "SignetCrypto",
                "COpenSSL", "CCurl", "CSignetOpenSSL", "CSignetCurl",
                .product(name: "SystemPackage", package: "swift-system")
            ]
        ),
        // Package: the signet/1 package: pack (patterns, the pipelined hasher, parallel deflate),
        // and reading one, local or over HTTPS ranges, with every check unpack makes before it
        // writes (layout, manifest signature, batched resource signatures); bare packages.
        .target(
            name: "SignetPackage",
            dependencies: [
                "SignetCore", "SignetCrypto", "SignetManifest", "SignetArchive", "SignetNetwork",
                "CSignetSystem", "CSignetZlib",
                .product(name: "SystemPackage", package: "swift-system")
            ]
        ),
        // Install: a package installed into a destination (unpack, `unpack URL`): staging beside
        // it, unchanged files shared with the installed tree, ranged updates and chunk rebuilds,
        // the atomic swap, the releases kept beside it (rollback, pending, confirm) and the hooks.
        .target(
            name: "SignetInstall",
            dependencies: [
                "SignetCore", "SignetCrypto", "SignetManifest", "SignetReverify", "SignetArchive", "SignetNetwork",
                "SignetPackage",
                "CSignetSystem", "CSignetZlib",
                .product(name: "SystemPackage", package: "swift-system")
            ]
        ),
        // TUF: The Update Framework's client and model: metadata, roles, thresholds, the root
        // chain, delegations, the package listing and rollout plans, over one transport seam
        // (HTTPS through the network layer, a copy on local media, the tests' in-memory
        // repository). No package format, no installing.
        .target(
            name: "SignetTUF",
            dependencies: [
                "SignetCore", "SignetCrypto", "SignetNetwork",
                "COpenSSL",
                .product(name: "SystemPackage", package: "swift-system")
            ]
        ),
        // Publish: the publisher's TUF repository (`repo …`): staging, review, signing,
        // rotation, renewal, rollout plans, releases re-signed.
        .target(
            name: "SignetPublish",
            dependencies: [
                "SignetCore", "SignetCrypto", "SignetManifest", "SignetNetwork", "SignetPackage", "SignetTUF",
                .product(name: "SystemPackage", package: "swift-system")
            ]
        ),
        // Update: the device's update policy (`signet update`): which listed release to
        // install, decided once from the trusted listing, the installed release and its
        // records, the plan, the options and the clock; then the install layer installs it.
        .target(
            name: "SignetUpdate",
            dependencies: [
                "SignetCore", "SignetCrypto", "SignetManifest", "SignetPackage", "SignetInstall", "SignetTUF",
                .product(name: "SystemPackage", package: "swift-system")
            ]
        ),
        // The umbrella: re-exports every layer, so that `import Signet` is all an app writes;
        // it holds only what spans them (interruption, the fuzz targets' entry points).
        .target(
            name: "Signet",
            dependencies: [
                "SignetCore", "SignetCrypto", "SignetManifest", "SignetReverify", "SignetArchive", "SignetNetwork", "SignetPackage",
                "SignetInstall", "SignetTUF", "SignetPublish", "SignetUpdate",
                "CSignetSystem",
                .product(name: "SystemPackage", package: "swift-system")
            ]
        ),
        .executableTarget(
            name: "signet",
            dependencies: [
                "Signet", "CSignetSystem",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "TOMLKit", package: "TOMLKit")
            ]
        ),
        // Fuzz targets for every parser of untrusted bytes (Fuzz/SignetFuzz/main.swift,
        // scripts/fuzz.sh). An ordinary build runs given inputs once: the tests run the seed
        // corpus and past crashes in Tests/SignetCLITests/FuzzCorpus through it.
        .executableTarget(
            name: "SignetFuzz",
            dependencies: ["Signet"],
            path: "Fuzz/SignetFuzz"
        ),
        // Helpers every test target uses: running peers (openssl, python3, nginx, the signet
        // binary), temporary directories, and the committed inputs (key fixtures, Wycheproof
        // vectors, the hostile-archive generator). No Signet layer: the core's tests use it too.
        .target(
            name: "SignetTestSupport",
            path: "Tests/SignetTestSupport",
            // Python helpers are read from Python/ beside the Swift file that runs them.
            exclude: ["Python"],
            resources: [.copy("Fixtures"), .copy("Vectors"), .copy("Hostile")]
        ),
        // The key fixtures as the library reads them, and `signetError`: for the tests of the
        // crypto layer and above.
        .target(
            name: "SignetCryptoTestSupport",
            dependencies: ["SignetCore", "SignetCrypto", "SignetTestSupport"],
            path: "Tests/SignetCryptoTestSupport"
        ),
        // The one builder of test packages for the package layer and above.
        .target(
            name: "SignetPackageTestSupport",
            dependencies: ["SignetCore", "SignetCrypto", "SignetNetwork", "SignetPackage", "SignetTestSupport", "SignetCryptoTestSupport"],
            path: "Tests/SignetPackageTestSupport"
        ),
        // One test target per library layer, depending on that layer alone (and what is below
        // it): a layer's tests cannot reach the layers above it. A layer whose behaviour is only
        // observable through a higher one (the archive reader through unpack, re-verification of
        // an installed tree) is tested there.
        .testTarget(name: "SignetCoreTests", dependencies: ["SignetCore", "SignetTestSupport"]),
        .testTarget(
            name: "SignetCryptoTests", dependencies: ["SignetCrypto", "SignetTestSupport", "SignetCryptoTestSupport"], exclude: ["Python", "Go"]),
        .testTarget(name: "SignetManifestTests", dependencies: ["SignetManifest", "SignetTestSupport", "SignetCryptoTestSupport"]),
        .testTarget(name: "SignetReverifyTests", dependencies: ["SignetReverify", "SignetTestSupport", "SignetCryptoTestSupport"]),
        .testTarget(name: "SignetNetworkTests", dependencies: ["SignetNetwork", "SignetTestSupport", "SignetCryptoTestSupport"]),
        // Not "SignetPackageTests": SwiftPM names the package's own test product so.
        .testTarget(
            name: "SignetPackageLayerTests", dependencies: ["SignetPackage", "SignetTestSupport", "SignetCryptoTestSupport", "SignetPackageTestSupport"],
            exclude: ["Python"]),
        .testTarget(
            name: "SignetInstallTests", dependencies: ["SignetInstall", "SignetTestSupport", "SignetCryptoTestSupport", "SignetPackageTestSupport"],
            exclude: ["Python"]),
        .testTarget(name: "SignetTUFTests", dependencies: ["SignetTUF", "SignetTestSupport", "SignetCryptoTestSupport"]),
        .testTarget(name: "SignetPublishTests", dependencies: ["SignetPublish", "SignetTestSupport", "SignetCryptoTestSupport", "SignetPackageTestSupport"]),
        // The device's policy; its end-to-end suites build repositories with the publisher (a
        // sibling layer, not one above it).
        .testTarget(
            name: "SignetUpdateTests",
            dependencies: ["SignetUpdate", "SignetPublish", "SignetTestSupport", "SignetCryptoTestSupport", "SignetPackageTestSupport"]),
        // The umbrella: the public API as an app sees it (`import Signet`), the README's
        // examples, and the house rules of the source tree.
        .testTarget(
            name: "SignetTests",
            dependencies: ["Signet", "SignetTestSupport", "SignetCryptoTestSupport", "SignetPackageTestSupport"]
        ),
        .testTarget(
            name: "SignetCLITests",
            // Depending on the executables makes `swift test` build them; the tests run the binaries.
            dependencies: ["signet", "SignetFuzz", "SignetTestSupport"],
            // The fuzz targets' seed corpus and past crashes (scripts/fuzz.sh adds to it).
            exclude: ["chunk_index.py", "json_schema_check.py", "tuf_tool.py", "Python", "Transparency"],
            resources: [.copy("FuzzCorpus")]
        )
    ]
)
