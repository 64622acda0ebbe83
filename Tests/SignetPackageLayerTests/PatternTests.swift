import Foundation
import Testing
@testable import SignetCore
@testable import SignetCrypto
@testable import SignetManifest
@testable import SignetArchive
@testable import SignetNetwork
@testable import SignetPackage

/// `--exclude` and `--structured` patterns follow `.gitignore`'s rules (issue 29, FORMAT.md §4
/// "Patterns"): `*` stays within one folder, `**` crosses, a pattern with a `/` is anchored.
@Suite("glob patterns with .gitignore's rules")
struct PatternTests {
    @Test(
        "what each pattern selects",
        arguments: [
            // * within one component; a pattern with a / is anchored at the root.
            ("config/*.json", "config/app.json", true),
            ("config/*.json", "config/mod0/cfg0.json", false),
            ("config/*.json", "other/config/app.json", false),
            ("config/**/*.json", "config/mod0/cfg0.json", true),
            ("config/**/*.json", "config/app.json", true),
            ("config/**/*.json", "config/a/b/c.json", true),
            ("config/**/*.json", "config/a/b/c.txt", false),
            // A name anywhere.
            ("*.log", "var/log/app.log", true),
            ("*.log", "app.log", true),
            ("*.log", "app.log.1", false),
            ("cache", "a/b/cache/x.bin", true),
            ("cache", "a/b/cached/x.bin", false),
            // A folder selects what is below it; trailing and leading slashes.
            ("var/tmp/*", "var/tmp/a/b", true),
            ("var/tmp/", "var/tmp/a", true),
            ("var/tmp", "x/var/tmp/a", false),
            ("/app.json", "app.json", true),
            ("/app.json", "sub/app.json", false),
            // ** at either end.
            ("**/cache", "a/b/cache/x", true),
            ("**/cache", "cache/x", true),
            ("var/**", "var/a/b", true),
            ("var/**", "varx/a", false),
            ("*/cache", "a/b/cache/x", false),
            ("*/cache", "a/cache/x", true),
            ("a/**/b", "a/b", true),
            ("a/**/b", "a/x/y/b", true),
            ("a/**/b", "a/x/y/c", false),
            // Character classes and ? within one component.
            ("d?/f[0-9].txt", "d1/f7.txt", true),
            ("d?/f[0-9].txt", "d1/x/f7.txt", false),
            ("?", "a/b", true),
            ("", "a", false)
        ])
    func selects(_ pattern: String, _ path: String, _ expected: Bool) {
        #expect(ResourcePath.matches(pattern: pattern, path) == expected, "\(pattern) on \(path)")
    }

    @Test("many ** components against a deep path finish (no blow-up on a hostile tree)")
    func manyDoubleStars() {
        let path = (0..<60).map { "d\($0)" }.joined(separator: "/")
        #expect(!ResourcePath.matches(pattern: "**/**/**/**/**/x", path))
    }
}
