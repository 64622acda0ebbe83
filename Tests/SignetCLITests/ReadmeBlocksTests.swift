import Foundation
import Testing
import SignetTestSupport

/// Issue 29: every shell block of README.md runs as written. Each block is preceded by a
/// `<!-- NAME -->` marker; this suite runs the blocks no other test runs (absolute paths such as
/// `/opt` and `/usr/share` moved into a temporary directory, `systemctl` and `sudo apt-get`
/// replaced by stand-ins that record what they were asked), and fails on a block without a
/// marker or with one it does not know, so that a new block cannot go untested.
@Suite("README.md: every shell block runs as written")
struct ReadmeBlocksTests {
    static let repository = UpdateCLITests.repository

    /// Where each marked block runs: here, or in the test named.
    static let runners: [String: String] = [
        "quick-start": "ReadmeBlocksTests.setUpBlocks (.ci/run runs it)",
        "install-deb": "ReadmeBlocksTests.setUpBlocks (.ci/run runs it)",
        "cli": "ReadmeBlocksTests.cli",
        "key-rotation": "ReadmeBlocksTests.keyRotation",
        "device-update": "ReadmeDeviceUpdateTests.walkThrough",
        "tuf-repository": "TUFCLITests.readmeRepository",
        "tuf-rotation": "TUFCLITests.readmeRepository",
        "tuf-keeping": "TUFCLITests.readmeRepository",
        "tuf-one-key": "TUFThresholdCLITests.readmeOneKey",
        "systemd": "ReadmeBlocksTests.systemd",
        "release-bad": "ReleasesCLITests.readme",
        "rollout": "RolloutCLITests.readme",
        "usb-stick": "UpdateCLITests.localMedia",
        "encryption": "EncryptionCLITests.readme",
        "agent": "ConfirmedInstallCLITests.readme",
        "agent-varlink": "ServiceCLITests.readme",
        "tlog": "TransparencyCLITests.readme",
        "hsm": "ReadmeBlocksTests.hsm",
        "structured": "ReadmeBlocksTests.structured",
        "test-pki": "ReadmeBlocksTests.testPKI",
        "ima-boot": "scripts/vm/guest/kernel.sh (the VM suite: run.sh copies the block into the guest, which runs it as written)"
    ]

    /// The README's shell blocks with the marker line before each (nil where there is none).
    static func blocks() throws -> [(marker: String?, text: String)] {
        let lines = try String(contentsOfFile: repository + "/README.md", encoding: .utf8).components(separatedBy: "\n")
        var found: [(String?, String)] = []
        var index = 0
        while index < lines.count {
            guard lines[index] == "```sh" || lines[index] == "```bash" || lines[index] == "```shell" else { index += 1; continue }
            let previous = index > 0 ? lines[index - 1] : ""
            let marker = previous.hasPrefix("<!-- ") && previous.hasSuffix(" -->") ? String(previous.dropFirst(5).dropLast(4)) : nil
            var body: [String] = []
            index += 1
            while index < lines.count, lines[index] != "```" { body.append(lines[index]); index += 1 }
            found.append((marker, body.joined(separator: "\n")))
            index += 1
        }
        return found
    }

    static func block(_ name: String) throws -> String {
        try #require(try blocks().first { $0.marker == name }?.text, "README.md has no block marked <!-- \(name) -->")
    }

    /// PATH with the signet under test first (and `extra` before it).
    static func environment(_ extra: [String] = [], _ more: [String: String?] = [:]) -> [String: String?] {
        let path = (extra + [URL(fileURLWithPath: CLI.binary).deletingLastPathComponent().path, ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"])
            .joined(separator: ":")
        return ["PATH": path].merging(more) { $1 }
    }

    /// A `/bin/sh` script at `path` with `body`, written and made executable by a child process.
    static func script(_ path: String, _ body: String) throws {
        let made = try run("bash", ["-c", "printf '#!/bin/sh\\n%b\\n' \"$1\" > \"$0\" && chmod 755 \"$0\"", path, body])
        guard made.status == 0 else { throw SupportError("cannot write \(path): \(made.stderr)") }
    }

    static func runBlock(_ text: String, in directory: String, environment: [String: String?]) throws -> ProcessResult {
        try run("bash", ["-euo", "pipefail", "-c", text], environment: environment, directory: directory)
    }

    @Test("every shell block has a marker this suite knows; the set-up blocks are what .ci/run runs")
    func setUpBlocks() throws {
        let blocks = try Self.blocks()
        #expect(blocks.count >= Self.runners.count)
        for block in blocks {
            #expect(
                block.marker.map { Self.runners[$0] != nil } == true,
                "a shell block in README.md without a known <!-- marker --> (add it to ReadmeBlocksTests.runners and run it): \(block.text.prefix(80))")
            #expect(try run("bash", ["-n", "-c", block.text]).status == 0, "not valid shell: \(block.text.prefix(80))")
        }
        #expect(Set(blocks.compactMap(\.marker)) == Set(Self.runners.keys), "a known marker is missing from README.md")
        // The quick start and the package install are CI's own steps.
        let ci = try String(contentsOfFile: Self.repository + "/.ci/run", encoding: .utf8)
        for line in try Self.block("quick-start").split(separator: "\n") {
            let command = String(line.split(separator: "#")[0]).trimmingCharacters(in: .whitespaces)
            #expect(ci.contains("run \(command)\n"), ".ci/run runs README's '\(command)'")
        }
        let deb = try Self.block("install-deb")
        // CI builds it in its own folder, beside `swift test`.
        #expect(deb.contains("scripts/build-deb.sh") && ci.contains("run env SIGNET_SCRATCH=.build-release scripts/build-deb.sh\n"))
        #expect(deb.contains("apt-get install ./dist/signet_*.deb") && ci.contains("run apt-get install -y -q \"./$deb\""))
    }

    @Test("the CLI tour: keygen, sign (also from CI's secret), verify, pack, inspect, unpack, getfattr, reverify, status")
    func cli() throws {
        let work = try TemporaryDirectory()
        let d = work.path
        let setup = """
            set -e
            mkdir -p dist run/secrets
            echo 'server = https://example.com' > dist/app.conf
            head -c 3000 /dev/urandom > dist/one.bin
            head -c 5000 /dev/urandom > dist/two.bin
            head -c 20000 /dev/urandom > release.tar
            echo 'not used: keygen makes an unencrypted key without a terminal' > run/secrets/signing
            """
        #expect(try run("bash", ["-c", setup], directory: d).status == 0)
        let text = try Self.block("cli").replacingOccurrences(of: "/opt/", with: d + "/opt/").replacingOccurrences(
            of: "/run/secrets/", with: d + "/run/secrets/")
        let ran = try Self.runBlock(text, in: d, environment: Self.environment())
        #expect(ran.status == 0, "\(ran.stderr)\n\(ran.stdoutText)")
        #expect(ran.stdoutText.contains("OK release.tar"), "\(ran.stdoutText)")
        #expect(ran.stdoutText.contains("user.signet.sig="), "getfattr shows the signature: \(ran.stdoutText)")
        #expect(ran.stdoutText.contains("OK \(d)/opt/app: app 1.4.2 (sequence 142)"), "\(ran.stdoutText)")
        #expect(FileManager.default.fileExists(atPath: d + "/dist/one.bin.sig"))
    }

    @Test("rotating a signing key: both keys trusted, then the new one only, the old one revoked")
    func keyRotation() throws {
        let work = try TemporaryDirectory()
        let d = work.path
        let setup = """
            set -e
            mkdir -p dist && echo 'app' > dist/app.conf
            signet keygen --out old --bits 2048 > /dev/null 2>&1
            """
        #expect(try run("bash", ["-c", setup], environment: Self.environment(), directory: d).status == 0)
        let ran = try Self.runBlock(try Self.block("key-rotation"), in: d, environment: Self.environment())
        #expect(ran.status == 0, "\(ran.stderr)\n\(ran.stdoutText)")
        #expect(ran.stdoutText.contains("OK device/app"), "\(ran.stdoutText)")
        // What step 3 promises: the retired key's release is refused now (exit 3).
        let refused = try run(
            "bash", ["-c", "signet unpack app-2.0.zip --dest device/other --trust-dir device/trust --revoked device/revoked.txt"],
            environment: Self.environment(), directory: d)
        #expect(refused.status == 3, "\(refused.stderr)")
    }

    @Test("the systemd block: systemctl and journalctl are asked what README says, for units the package installs")
    func systemd() throws {
        let work = try TemporaryDirectory()
        let d = work.path
        let bin = work.file("bin")
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
        // Written by a child process: a script this (multi-threaded) process had open for
        // writing could be inherited by another test's child and fail with ETXTBSY at exec.
        for tool in ["systemctl", "journalctl"] {
            try Self.script(bin + "/" + tool, "echo \"\(tool) $*\" >> \"\(d)/calls.txt\"")
        }
        let ran = try Self.runBlock(try Self.block("systemd"), in: d, environment: Self.environment([bin]))
        #expect(ran.status == 0, "\(ran.stderr)")
        let calls = try String(contentsOfFile: d + "/calls.txt", encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(
            calls == ["systemctl edit signet-update@app.service", "systemctl enable --now signet-update@app.timer", "journalctl -u signet-update@app.service"],
            "\(calls)")
        for unit in ["signet-update@.service", "signet-update@.timer"] {
            #expect(FileManager.default.fileExists(atPath: Self.repository + "/packaging/systemd/" + unit), "the package installs \(unit)")
        }
    }

    @Test("the HSM block: a SoftHSM2 token set up as written, the key shown and exported, a package signed on the token")
    func hsm() throws {
        guard FileManager.default.fileExists(atPath: "/usr/lib/softhsm/libsofthsm2.so") else {
            throw SupportError("SoftHSM2 is not installed; scripts/install-deps.sh installs softhsm2")
        }
        let work = try TemporaryDirectory()
        let d = work.path
        let bin = work.file("bin")
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
        // sudo runs the command as is (the tests run as root or need no root here); apt-get only
        // checks that the package is there (tests do not install from the network).
        try Self.script(bin + "/sudo", "exec \"$@\"")
        try Self.script(bin + "/apt-get", "[ \"$1\" = install ] && shift && exec dpkg -s \"$@\" > /dev/null\nexit 1")
        let setup = """
            set -e
            echo 5678 > so-pin.txt && echo 1234 > pin.txt
            openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out release-key.pem 2>/dev/null
            mkdir -p build && echo 'built' > build/app.bin
            """
        #expect(try run("bash", ["-c", setup], directory: d).status == 0)
        let ran = try Self.runBlock(
            try Self.block("hsm"), in: d,
            environment: Self.environment([bin], ["HOME": d, "TOKEN_PIN": "1234", "SOFTHSM2_CONF": nil, "SIGNET_PKCS11_MODULE": nil]))
        #expect(ran.status == 0, "\(ran.stderr)\n\(ran.stdoutText)")
        // The package verifies with the key exported from the token, which is the PEM's key.
        let checked = try run(
            "bash", ["-c", "signet inspect app-1.4.0.zip --pubkey release.der && openssl pkey -in release-key.pem -pubout -outform DER | cmp - release.der"],
            environment: Self.environment(), directory: d)
        #expect(checked.status == 0, "\(checked.stderr)\n\(checked.stdoutText)")
    }

    @Test("structured resources: packed with --structured, rules shipped, an allowed key edited: the check passes; another key changed: it fails")
    func structured() throws {
        let work = try TemporaryDirectory()
        let d = work.path
        let setup = """
            set -e
            mkdir -p dist/config
            signet keygen --out keys --bits 2048 > /dev/null 2>&1
            printf '{"serial": "unset", "server": {"url": "https://a.example"}, "mode": "production"}\\n' > dist/config/device.json
            cat > dist/Info.plist <<'PLIST'
            <?xml version="1.0" encoding="UTF-8"?>
            <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
            <plist version="1.0"><dict><key>CFBundleVersion</key><string>2.1.0</string>
            <key>CFBundleURLTypes</key><array><dict><key>CFBundleURLName</key><string>com.example.myapp</string></dict></array></dict></plist>
            PLIST
            """
        #expect(try run("bash", ["-c", setup], environment: Self.environment(), directory: d).status == 0)
        let text = try Self.block("structured").replacingOccurrences(of: "/usr/share/", with: d + "/usr/share/").replacingOccurrences(
            of: "/opt/", with: d + "/opt/")
        let ran = try Self.runBlock(text, in: d, environment: Self.environment())
        #expect(ran.status == 0, "\(ran.stderr)\n\(ran.stdoutText)")
        #expect(try String(contentsOfFile: d + "/opt/myapp/resources/config/device.json", encoding: .utf8).contains("SN-0042"))
        // A key the rules do not allow: the same check fails and names it.
        let changed = try run(
            "bash",
            [
                "-c",
                "f=opt/myapp/resources/config/device.json; e=$(sed 's/production/debug/' $f); printf '%s\\n' \"$e\" > $f; signet reverify opt/myapp/resources --pubkey usr/share/myapp/public_key.der --rules usr/share/myapp/reverify-rules.json"
            ],
            environment: Self.environment(), directory: d)
        #expect(changed.status == 1 && changed.stdoutText.contains("mode"), "\(changed.stdoutText) \(changed.stderr)")
    }

    @Test("the test PKI script: root, intermediate (CA, pathlen 0), a server certificate with the host in subjectAltName; a pin by file")
    func testPKI() throws {
        let work = try TemporaryDirectory()
        let d = work.path
        let text = try Self.block("test-pki").replacingOccurrences(of: "examples/pki/", with: Self.repository + "/examples/pki/")
        let ran = try Self.runBlock(text, in: d, environment: Self.environment())
        #expect(ran.status == 0, "\(ran.stderr)\n\(ran.stdoutText)")
        #expect(ran.stdoutText.contains("pki/server.pem: OK"), "\(ran.stdoutText)")
        let described = try run("openssl", ["x509", "-in", d + "/pki/server.pem", "-noout", "-ext", "subjectAltName"])
        #expect(described.stdoutText.contains("DNS:updates.example.com"), "\(described.stdoutText)")
        let intermediate = try run("openssl", ["x509", "-in", d + "/pki/intermediate.pem", "-noout", "-ext", "basicConstraints"])
        #expect(intermediate.stdoutText.contains("CA:TRUE") && intermediate.stdoutText.contains("pathlen:0"), "\(intermediate.stdoutText)")
        let chain = try String(contentsOfFile: d + "/pki/chain.pem", encoding: .utf8)
        #expect(chain.components(separatedBy: "BEGIN CERTIFICATE").count == 3, "leaf and intermediate")
        // What README's $PIN_NOW is, given as the file itself.
        let shown = try CLI.run(["key", "show", d + "/pki/intermediate.pem", "--json"])
        let pin = try shown.json()["pin"] as? String
        #expect(shown.status == 0 && pin?.hasPrefix("sha256//") == true, "\(shown.stderr)")
        // README: evmctl takes the certificate (not public_key.der).
        let readme = try String(contentsOfFile: Self.repository + "/README.md", encoding: .utf8)
        #expect(readme.contains("`evmctl ima_verify --key` takes the signer's X.509 certificate (keygen's `certificate.der`)"))
    }
}
